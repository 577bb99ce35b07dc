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
// render the same objects (samePodMetrics), and the file parses to the
// configuration manifests/components/pod-metrics ships.
func TestChartMatchesPodMetricsManifests(t *testing.T) {
	tc := setup(t)
	got := tc.samePodMetrics(t, "pod-metrics-values.yaml", "manifests/examples/inference-autoscaling")
	shipped, err := os.ReadFile(filepath.Join(tc.root, "manifests", "components", "pod-metrics", "pod-metrics.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(parsePodMetrics(t, "shipped", shipped), got, ignorePodMetricsUnexported); diff != "" {
		t.Errorf("the pod-metrics file differs from the shipped one (-shipped +chart):\n%s", diff)
	}
}

// ignorePodMetricsUnexported leaves out what promscrape.Parse derives.
var ignorePodMetricsUnexported = cmpopts.IgnoreUnexported(promscrape.PodTargets{}, promscrape.TrustedTarget{}, promscrape.Matcher{})

// samePodMetrics is sameAsKustomize for a values file and a kustomization
// that both render the pod-endpoint source: they must be the same but for
// what each tool does its own way to roll the pods when the file changes
// (kustomize's hash suffix on the ConfigMap's name, the chart's checksum
// annotation), and the file's text, which must parse to the same
// configuration on both sides. It returns the chart's, parsed.
func (tc testChart) samePodMetrics(t *testing.T, values, kustomization string) *promscrape.Config {
	t.Helper()
	files := map[string]string{}
	tc.sameAsKustomize(t, values, kustomization, func(side string, objs []*unstructured.Unstructured) {
		files[side] = normalisePodMetrics(t, objs)
	})
	fromChart, fromKustomize := parsePodMetrics(t, "chart", []byte(files["chart"])), parsePodMetrics(t, kustomization, []byte(files["kustomize"]))
	if diff := cmp.Diff(fromKustomize, fromChart, ignorePodMetricsUnexported); diff != "" {
		t.Errorf("the chart's pod-metrics file with values %q differs from %s's (-kustomize +chart):\n%s", values, kustomization, diff)
	}
	return fromChart
}

// TestPodMetricsValuesThatCannotWork: the chart refuses the source without
// custom metrics, and without a file.
func TestPodMetricsValuesThatCannotWork(t *testing.T) {
	setup(t).testRefusals(t, []refusal{
		{name: "podMetrics.enabled needs customMetrics.enabled", sets: []string{"podMetrics.enabled=true", "podMetrics.config.presets={vllm}"}, want: "podMetrics.enabled needs customMetrics.enabled"},
		{name: "set podMetrics.config", sets: []string{"podMetrics.enabled=true", "customMetrics.enabled=true"}, want: "set podMetrics.config"},
		{name: "endpointPickers needs podMetrics.enabled", sets: []string{"podMetrics.endpointPickers.enabled=true"}, want: "podMetrics.endpointPickers.enabled needs podMetrics.enabled"},
		{name: "endpointPickers needs podMetrics.enabled without rbac", sets: []string{"podMetrics.endpointPickers.enabled=true", "rbac.create=false"}, want: "podMetrics.endpointPickers.enabled needs podMetrics.enabled"},
	})
}

// TestEndpointPickersValues: podMetrics.endpointPickers renders the token
// with the audience and lifetime given, mounted where a picker's tokenFile
// points, and the ClusterRole and its binding named after the release as
// the server's own (system:<fullname>) and bound to its ServiceAccount;
// without rbac.create, the token alone. Off, it renders neither.
func TestEndpointPickersValues(t *testing.T) {
	tc := setup(t)
	const mount = "/var/run/secrets/group-metrics-server/endpoint-picker"
	cases := []struct {
		name     string
		sets     []string
		role     string // the ClusterRole and binding; none when empty
		sa       string
		audience string // the token's; no token when empty
		seconds  float64
	}{
		{
			name: "defaults",
			sets: []string{"podMetrics.endpointPickers.enabled=true"},
			role: "system:group-metrics-server-endpoint-pickers", sa: "group-metrics-server",
			audience: "https://kubernetes.default.svc.cluster.local", seconds: 3600,
		},
		{
			name: "another release, audience and lifetime",
			sets: []string{
				"podMetrics.endpointPickers.enabled=true", "fullnameOverride=gms",
				"podMetrics.endpointPickers.tokenAudience=https://oidc.example.com",
				"podMetrics.endpointPickers.tokenExpirationSeconds=7200",
			},
			role: "system:gms-endpoint-pickers", sa: "gms",
			audience: "https://oidc.example.com", seconds: 7200,
		},
		{
			name:     "without rbac.create",
			sets:     []string{"podMetrics.endpointPickers.enabled=true", "rbac.create=false"},
			audience: "https://kubernetes.default.svc.cluster.local", seconds: 3600,
		},
		{name: "off"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := tc.render(t, "pod-metrics-values.yaml", c.sets...)
			// Kind, name, roleRef and subjects of the ClusterRole and binding.
			var roles []any
			for _, o := range objs {
				if strings.HasSuffix(o.GetName(), "-endpoint-pickers") {
					ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
					subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
					roles = append(roles, []any{o.GetKind(), o.GetName(), ref, subjects})
				}
			}
			var wantRoles []any
			if c.role != "" {
				sa := []any{map[string]any{"kind": "ServiceAccount", "name": c.sa, "namespace": "kube-system"}}
				wantRoles = []any{[]any{"ClusterRole", c.role, "", []any(nil)}, []any{"ClusterRoleBinding", c.role, c.role, sa}}
			}
			if diff := cmp.Diff(wantRoles, roles); diff != "" {
				t.Errorf("endpoint pickers' RBAC (-want +got):\n%s", diff)
			}

			release := chart.Name // or sa, the full name fullnameOverride sets
			if c.sa != "" {
				release = c.sa
			}
			spec := podSpec(t, objs, release)
			var wantVolumes, wantMounts []any
			if c.audience != "" {
				wantVolumes = []any{map[string]any{"name": "endpoint-picker-token", "projected": map[string]any{"sources": []any{
					map[string]any{"serviceAccountToken": map[string]any{"audience": c.audience, "expirationSeconds": c.seconds, "path": "token"}},
				}}}}
				wantMounts = []any{map[string]any{"name": "endpoint-picker-token", "mountPath": mount, "readOnly": true}}
			}
			if diff := cmp.Diff(wantVolumes, named(spec["volumes"], "endpoint-picker-token")); diff != "" {
				t.Errorf("token volume (-want +got):\n%s", diff)
			}
			ctr := spec["containers"].([]any)[0].(map[string]any)
			if diff := cmp.Diff(wantMounts, named(ctr["volumeMounts"], "endpoint-picker-token")); diff != "" {
				t.Errorf("token mount (-want +got):\n%s", diff)
			}
		})
	}
}

// named returns the entries of list (volumes or volume mounts) named name.
func named(list any, name string) []any {
	var out []any
	l, _ := list.([]any)
	for _, e := range l {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			out = append(out, e)
		}
	}
	return out
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
