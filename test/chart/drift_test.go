//go:build chart

package chart_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
		// expect changes the kustomization's objects to what the chart
		// must render, for a change manifests/ gets separately.
		expect func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{name: "default", kustomization: "manifests/base"},
		{name: "high-availability", values: "high-availability-values.yaml", kustomization: "manifests/high-availability", expect: haRollsOverTwoNodes},
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
			if c.expect != nil {
				c.expect(t, fromKustomize)
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

// haRollsOverTwoNodes: the high-availability component moves to
// metrics-server's maxUnavailable 1, so that two replicas with required
// anti-affinity roll over two eligible nodes (issue 15). The chart's
// ci/high-availability-values.yaml says so already; until the component
// does, the comparison expects it of the kustomization, and once it does
// this changes nothing.
func haRollsOverTwoNodes(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != chart.Name {
			continue
		}
		if err := unstructured.SetNestedField(o.Object, float64(1), "spec", "strategy", "rollingUpdate", "maxUnavailable"); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("manifests/high-availability has no Deployment %s", chart.Name)
}
