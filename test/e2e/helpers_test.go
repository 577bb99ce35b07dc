//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// begin returns a context bounded by d for one test and, if the test fails,
// logs the tail of every process's log.
func begin(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(suite.ctx, d)
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("process logs:\n%s", suite.cluster.LogTails(40))
		}
	})
	return ctx
}

// newNamespace creates a namespace that is deleted when the test ends.
func newNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	client := suite.cluster.Client()
	must(t, env.CreateNamespace(ctx, client, name))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
}

// watched are the processes whose exit ends a wait early.
func watched() []*cluster.Process {
	var out []*cluster.Process
	for _, p := range suite.cluster.Processes() {
		if p.Name() == "kube-apiserver" || p.Name() == "etcd" || p == suite.server.Process {
			out = append(out, p)
		}
	}
	return out
}

// poll is env.Poll watching the control plane and the server.
func poll(ctx context.Context, what string, check func(context.Context) error) error {
	return cluster.Poll(ctx, what, watched(), check)
}

// table is the output of a kubectl command that prints columns.
type table struct {
	header []string
	rows   [][]string
}

func parseTable(out string) table {
	var tb table
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if i == 0 {
			tb.header = f
			continue
		}
		if len(f) > 0 {
			tb.rows = append(tb.rows, f)
		}
	}
	return tb
}

// byKey maps the joined values of the key columns to each row.
func (tb table) byKey(keyCols int) map[string][]string {
	m := map[string][]string{}
	for _, r := range tb.rows {
		if len(r) < keyCols {
			continue
		}
		m[strings.Join(r[:keyCols], "/")] = r
	}
	return m
}

// milli and mebi print CPU and memory as kubectl top does.
func milli(nanoCores uint64) string { return fmt.Sprintf("%dm", (nanoCores+999_999)/1_000_000) }
func mebi(bytes uint64) string      { return fmt.Sprintf("%dMi", bytes/(1<<20)) }

// must fails the test at once if err is not nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runDeployment sets the fleet's usage for spec's pods, creates the
// Deployment, waits until its pods run, and returns them and their
// namespace/name keys.
func runDeployment(ctx context.Context, t *testing.T, spec env.DeploymentSpec, usage fakekubelet.Usage) ([]corev1.Pod, []string) {
	t.Helper()
	client := suite.cluster.Client()
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: spec.Namespace, Selector: spec.Selector()}, usage)
	must(t, env.CreateDeployment(ctx, client, spec))
	pods, err := env.WaitForRunningPods(ctx, client, spec.Namespace, spec.Selector(), int(spec.Replicas))
	must(t, err)
	keys := make([]string, 0, len(pods))
	for _, p := range pods {
		keys = append(keys, spec.Namespace+"/"+p.Name)
	}
	return pods, keys
}

// every calls step every d until ctx ends.
func every(ctx context.Context, d time.Duration, step func()) {
	ticker := time.NewTicker(d)
	defer ticker.Stop()
	for ctx.Err() == nil {
		step()
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}
