//go:build chart

package chart_test

import (
	"path/filepath"
	"testing"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// testChart is what every test of the chart needs: the repository, the
// chart, bin/helm and bin/kubectl (make tools).
type testChart struct {
	root, chartDir, kubectl string
	helm                    chart.Helm
}

func setup(t *testing.T) testChart {
	t.Helper()
	root, err := env.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := env.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.CheckBinaries(bin, chart.HelmBinary, cluster.KubectlBinary); err != nil {
		t.Fatal(err)
	}
	return testChart{
		root:     root,
		chartDir: chart.Dir(root),
		kubectl:  filepath.Join(bin, cluster.KubectlBinary),
		helm:     chart.Helm{Binary: filepath.Join(bin, chart.HelmBinary), Home: t.TempDir()},
	}
}
