//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// compareReplicas waits until every replica serves every pod of want with
// a window that began after settled, and checks they serve the same pods and
// nodes with the same values: the fleet's usage is constant, so the replicas'
// rates agree within cpuTolerance (see differential_test.go) although they
// scrape at different instants.
func compareReplicas(ctx context.Context, t *testing.T, s *env.Server, procs []*cluster.Process, pinned map[*cluster.Process]endpoint, ns string, want []string, settled time.Time) {
	t.Helper()
	began := time.Now()
	snaps := make([]metricsSnapshot, len(procs))
	// Two scrapes after settled give every replica a window that starts
	// after it; the slack covers a loaded machine.
	bound := 2*(suite.resolution+suite.timeout) + 20*time.Second
	must(t, boundedPoll(ctx, bound, "the replicas to serve every pod from settled windows", procs, func(ctx context.Context) error {
		for i, p := range procs {
			c := pinned[p]
			mc, err := metricsclient.NewForConfigAndClient(s.RESTConfig(), c.client)
			if err != nil {
				return err
			}
			snap, err := snapshot(ctx, mc)
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			snap = snap.only(func(k string) bool { return strings.HasPrefix(k, ns+"/") || isNode(k) })
			if got, err := replicaOf(ctx, c, procs); err != nil || got != p {
				return fmt.Errorf("the connection to %s moved: %w", p.Name(), err)
			}
			for _, k := range want {
				if _, ok := snap[k]; !ok {
					return fmt.Errorf("%s does not serve %s yet", p.Name(), k)
				}
			}
			// Nodes sum every pod on them, including those of other tests
			// that may still be going away.
			pods := snap.only(func(k string) bool { return !isNode(k) })
			if err := pods.settledSince(settled); err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			snaps[i] = snap
		}
		return nil
	}))
	for i := 1; i < len(snaps); i++ {
		report, err := comparison{a: procs[0].Name(), b: procs[i].Name(), podsOnly: true}.compare(snaps[0], snaps[i])
		if err != nil {
			t.Errorf("%s vs %s: %v", procs[0].Name(), procs[i].Name(), err)
		}
		t.Logf("%s vs %s, %v after the first check:\n%s", procs[0].Name(), procs[i].Name(), time.Since(began).Round(time.Millisecond), report)
	}
}
