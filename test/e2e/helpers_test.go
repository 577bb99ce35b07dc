//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	cleanup(t, "delete namespace "+name, func(ctx context.Context) error {
		return client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// newServiceAccount creates a ServiceAccount, bound to no role, and returns its token.
func newServiceAccount(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	_, err := suite.cluster.Client().CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	token, err := saToken(ctx, ns, name)
	must(t, err)
	return token
}

// saToken is a token of the ServiceAccount namespace/name, as the
// TokenRequest API issues it to a pod, for audiences (the API server's own
// if none are given).
func saToken(ctx context.Context, namespace, name string, audiences ...string) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(int64(3600))}}
	tr, err := suite.cluster.Client().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// cleanup calls undo, bounded by 30 s, when the test ends; an error fails
// the test.
func cleanup(t *testing.T, what string, undo func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := undo(ctx); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// addKraftletNode registers a kraftlet node, with no kubelet, and deletes
// it when the test ends.
func addKraftletNode(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	must(t, env.AddKraftletNode(ctx, suite.cluster, node))
	cleanup(t, "delete node "+node, func(ctx context.Context) error {
		return suite.cluster.Client().CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	})
}

// kwokPod is a bare pod bound to node with the one container ctr, which
// tolerates the kwok nodes' taint.
func kwokPod(ns, name, node string, podLabels map[string]string, ctr corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Containers:                    []corev1.Container{ctr},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations:                   []corev1.Toleration{{Key: cluster.KwokNodeAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

// createPods creates pods, deletes them when the test ends, and waits, for
// at most bound and while watch run, until they run with an IP.
func createPods(ctx context.Context, t *testing.T, bound time.Duration, watch []*cluster.Process, pods ...*corev1.Pod) {
	t.Helper()
	client := suite.cluster.Client()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		cleanup(t, "delete pod "+p.Namespace+"/"+p.Name, func(ctx context.Context) error {
			err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			return ignoreNotFound(err)
		})
	}
	must(t, boundedPoll(ctx, bound, fmt.Sprintf("%d pods to run", len(pods)), watch, func(ctx context.Context) error {
		for _, p := range pods {
			got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
				return fmt.Errorf("pod %s/%s is %s", p.Namespace, p.Name, got.Status.Phase)
			}
		}
		return nil
	}))
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
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

// poll is cluster.Poll watching the control plane and the server.
func poll(ctx context.Context, what string, check func(context.Context) error) error {
	return cluster.Poll(ctx, what, watched(), check)
}

func boundedPoll(ctx context.Context, d time.Duration, what string, watch []*cluster.Process, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return cluster.Poll(ctx, what, watch, check)
}

func pollBounded(ctx context.Context, d time.Duration, what string, check func(context.Context) error) error {
	return boundedPoll(ctx, d, what, watched(), check)
}

// table is the output of a kubectl command that prints columns.
type table struct {
	header []string
	rows   [][]string
}

func parseTable(out string) table {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tb := table{header: strings.Fields(lines[0])}
	for _, line := range lines[1:] {
		if f := strings.Fields(line); len(f) > 0 {
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

func repoPath(t testing.TB, elem ...string) string {
	t.Helper()
	root, err := env.RepoRoot()
	must(t, err)
	return filepath.Join(append([]string{root}, elem...)...)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	return data
}

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

// background calls step every d in a goroutine of its own until the
// returned function is called, which returns once step has.
func background(ctx context.Context, d time.Duration, step func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { every(ctx, d, func() { step(ctx) }) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// deployOwnServer deploys a server of its own from manifests/base (or the
// kustomization in manifestsDir), with extraArgs, registered in place of the
// suite's server until the test ends; then the suite's server gets the
// registration back and every process of the returned server is stopped.
func deployOwnServer(ctx context.Context, t *testing.T, name string, extraArgs []string, manifestsDir ...string) *env.Server {
	t.Helper()
	cfg := suiteServerConfig(name, extraArgs)
	if len(manifestsDir) > 0 {
		cfg.ManifestsDir = manifestsDir[0]
	}
	began := time.Now()
	s, err := env.DeployServer(ctx, suite.cluster, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(suite.ctx, time.Minute)
		defer cancel()
		restore := suite.server.Register
		if s != nil {
			restore = func(ctx context.Context) error { return s.Undeploy(ctx, suite.server) }
		}
		if err := restore(ctx); err != nil {
			t.Errorf("hand the APIServices back to the suite's server: %v", err)
		}
	})
	must(t, err)
	t.Logf("%s Available in %v", name, since(began))
	return s
}

// ownCluster starts a control plane and a fleet of nodes of the test's
// own, for tests that install, rotate or uninstall what the suite's
// cluster depends on. Both stop when the test ends.
func ownCluster(ctx context.Context, t *testing.T, nodes int) (*cluster.Cluster, *env.Fleet) {
	t.Helper()
	workDir, err := os.MkdirTemp("", "gms-e2e-own-")
	must(t, err)
	opts := suite.opts
	opts.WorkDir = workDir
	began := time.Now()
	c, err := cluster.Start(suite.ctx, opts)
	must(t, err)
	var fleet *env.Fleet
	t.Cleanup(func() {
		if fleet != nil {
			_ = fleet.Close()
		}
		if t.Failed() {
			t.Logf("own cluster's process logs (kept in %s):\n%s", workDir, c.LogTails(60))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop the test's cluster: %v", err)
		}
		if !t.Failed() {
			_ = os.RemoveAll(workDir)
		}
	})
	fleet, err = env.StartFleet(ctx, c, env.FleetConfig{Nodes: nodes, NodeBaseUsage: nodeBase})
	must(t, err)
	t.Logf("own cluster with %d nodes up in %v", nodes, since(began))
	return c, fleet
}
