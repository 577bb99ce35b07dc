//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

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
