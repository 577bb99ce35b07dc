//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// deployOwnServer deploys a server of its own from manifests/base (or the
// kustomization in manifestsDir), with extraArgs, registered in place of the suite's server until the test ends;
// then the suite's server gets the registration back and every process of
// the returned server is stopped.
func deployOwnServer(ctx context.Context, t *testing.T, name string, extraArgs []string, manifestsDir ...string) *env.Server {
	t.Helper()
	cfg := env.ServerConfig{
		BinDir:                suite.binDir,
		KubeletCAFile:         suite.fleet.CAFile,
		MetricResolution:      suite.resolution,
		KubeletRequestTimeout: suite.timeout,
		ExtraArgs:             append(hpaReadinessArgs(), extraArgs...),
		ProcessName:           name,
	}
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
