//go:build chart

package chart_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/test/chart"
)

const podMetricsConfigMap = "group-metrics-server-pod-metrics"

// TestChartMatchesPodMetricsManifests: the chart with
// ci/pod-metrics-values.yaml and manifests/examples/inference-autoscaling
// render the same objects, but for what each tool does its own way to roll
// the pods when the file changes (kustomize's hash suffix on the
// ConfigMap's name, the chart's checksum annotation), and the file itself,
// which must parse to the same configuration as the one
// manifests/components/pod-metrics ships.
func TestChartMatchesPodMetricsManifests(t *testing.T) {
	tc := setup(t)
	files := map[string]string{}
	tc.sameAsKustomize(t, "pod-metrics-values.yaml", "manifests/examples/inference-autoscaling", func(side string, objs []*unstructured.Unstructured) {
		files[side] = normalisePodMetrics(t, objs)
	})
	shipped, err := os.ReadFile(filepath.Join(tc.root, "manifests", "components", "pod-metrics", "pod-metrics.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := parsePodMetrics(t, "shipped", shipped)
	for side, f := range files {
		if diff := cmp.Diff(want, parsePodMetrics(t, side, []byte(f)), cmpopts.IgnoreUnexported(promscrape.PodTargets{}, promscrape.TrustedTarget{}, promscrape.Matcher{})); diff != "" {
			t.Errorf("%s's pod-metrics file differs from the shipped one (-shipped +%s):\n%s", side, side, diff)
		}
	}
}

// TestPodMetricsValuesThatCannotWork: the chart refuses the source without
// custom metrics, and without a file.
func TestPodMetricsValuesThatCannotWork(t *testing.T) {
	setup(t).testRefusals(t, []refusal{
		{name: "podMetrics.enabled needs customMetrics.enabled", sets: []string{"podMetrics.enabled=true", "podMetrics.config.presets={vllm}"}, want: "podMetrics.enabled needs customMetrics.enabled"},
		{name: "set podMetrics.config", sets: []string{"podMetrics.enabled=true", "customMetrics.enabled=true"}, want: "set podMetrics.config"},
	})
}

// normalisePodMetrics names the pod-metrics ConfigMap (and the volume that
// mounts it) without kustomize's suffix, drops the chart's checksum
// annotation, takes the file out of the ConfigMap, and returns the file.
func normalisePodMetrics(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var file string
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), podMetricsConfigMap):
			o.SetName(podMetricsConfigMap)
			file, _, _ = unstructured.NestedString(o.Object, "data", "config.yaml")
			unstructured.RemoveNestedField(o.Object, "data")
		case o.GetKind() == "Deployment" && o.GetName() == chart.Name:
			unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations", "checksum/pod-metrics-config")
			if a, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "metadata", "annotations"); len(a) == 0 {
				unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations")
			}
			vols, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "volumes")
			vs, _ := vols.([]any)
			for _, v := range vs {
				if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok && strings.HasPrefix(cm["name"].(string), podMetricsConfigMap) {
					cm["name"] = podMetricsConfigMap
				}
			}
		}
	}
	if file == "" {
		t.Fatal("no pod-metrics ConfigMap with a config.yaml")
	}
	return file
}

func parsePodMetrics(t *testing.T, name string, data []byte) *promscrape.Config {
	t.Helper()
	cfg, errs := promscrape.Parse(data)
	if len(errs) > 0 {
		t.Fatalf("%s pod-metrics file: %v", name, errs)
	}
	return cfg
}
