//go:build chart

package chart_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
)

// TestChartMatchesManifests renders the chart (as release
// group-metrics-server in kube-system) with default values and with each
// example values file that stands for a kustomization of manifests/, and
// that kustomization, and compares the objects: the same set, equal but
// for the labels only the chart adds.
func TestChartMatchesManifests(t *testing.T) {
	tc := setup(t)
	cases := []struct {
		name          string
		values        string
		kustomization string
	}{
		{name: "default", kustomization: "manifests/base"},
		{name: "high-availability", values: "high-availability-values.yaml", kustomization: "manifests/high-availability"},
		{name: "custom-metrics", values: "custom-metrics-values.yaml", kustomization: "manifests/custom-metrics"},
		{name: "cert-manager", values: "cert-manager-values.yaml", kustomization: "manifests/examples/cert-manager"},
		{name: "serving-cert-files", values: "serving-cert-files-values.yaml", kustomization: "manifests/examples/serving-cert-files"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var values []string
			if c.values != "" {
				values = []string{filepath.Join(tc.chartDir, "ci", c.values)}
			}
			fromChart, err := tc.helm.Template(ctx, tc.chartDir, "kube-system", values)
			if err != nil {
				t.Fatal(err)
			}
			fromKustomize, err := chart.Kustomize(ctx, tc.kubectl, filepath.Join(tc.root, c.kustomization))
			if err != nil {
				t.Fatal(err)
			}
			got, err := chart.WithoutChartLabels(fromChart)
			if err != nil {
				t.Fatalf("chart: %v", err)
			}
			want, err := chart.WithoutChartLabels(fromKustomize)
			if err != nil {
				t.Fatalf("%s: %v", c.kustomization, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("chart with %s differs from kubectl kustomize %s (-kustomize +chart):\n%s", valuesName(c.values), c.kustomization, diff)
			}
			t.Logf("%s: %d objects, equal to %s's", valuesName(c.values), len(fromChart), c.kustomization)
		})
	}
}

func valuesName(v string) string {
	if v == "" {
		return "default values"
	}
	return "ci/" + v
}
