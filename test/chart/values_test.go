//go:build chart

package chart_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
)

// exampleValues returns the values files under the chart's ci/, each
// documented for users and each linted and rendered here.
func exampleValues(t *testing.T, tc testChart) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(tc.chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("want the chart's example values files under ci/, found %v", files)
	}
	sort.Strings(files)
	return files
}

// TestLint runs helm lint --strict and helm template with default values
// and with each example values file.
func TestLint(t *testing.T) {
	tc := setup(t)
	for _, values := range append([]string{""}, exampleValues(t, tc)...) {
		name := "default"
		if values != "" {
			name = filepath.Base(values)
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := []string{"lint", "--strict", tc.chartDir, "--namespace", "kube-system"}
			var files []string
			if values != "" {
				args = append(args, "--values", values)
				files = []string{values}
			}
			if out, err := tc.helm.Run(ctx, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			objs, err := tc.helm.Template(ctx, tc.chartDir, "kube-system", files)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatal("rendered no object")
			}
			for _, o := range objs {
				if o.GetKind() == "APIService" {
					if v, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "insecureSkipTLSVerify"); found {
						t.Errorf("%s has insecureSkipTLSVerify %v", o.GetName(), v)
					}
				}
			}
		})
	}
}

// TestDefaultObjectCount logs how many objects the default values render,
// and checks them against manifests/base's kinds.
func TestDefaultObjectCount(t *testing.T) {
	tc := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := tc.helm.Template(ctx, tc.chartDir, "kube-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	want := map[string]int{
		"ServiceAccount": 2, "ClusterRole": 3, "ClusterRoleBinding": 3, "Role": 1, "RoleBinding": 2,
		"Service": 1, "Secret": 2, "Lease": 1, "Deployment": 2, "APIService": 2,
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds rendered for default values (-want +got):\n%s", diff)
	}
	t.Logf("default values render %d objects: %v", len(objs), kinds)
}

// TestSchemaRefusesUnknownValues: a misspelt or misplaced value, or one
// of the wrong type or outside its set, fails helm template through
// values.schema.json, naming the value.
func TestSchemaRefusesUnknownValues(t *testing.T) {
	tc := setup(t)
	cases := []struct {
		name, set, want string
	}{
		{name: "top-level typo", set: "replica=2", want: "replica"},
		{name: "nested typo", set: "image.tags=v1", want: "tags"},
		{name: "typo under tls", set: "tls.certManger.duration=1h", want: "certManger"},
		{name: "typo under ukpd", set: "ukpd.endpoint=https://u", want: "endpoint"},
		{name: "typo under certController", set: "certController.replica=2", want: "replica"},
		{name: "typo under podDisruptionBudget", set: "podDisruptionBudget.minAvailabe=1", want: "minAvailabe"},
		{name: "wrong type", set: "replicas=two", want: "replicas"},
		{name: "unknown tls type", set: "tls.type=helm", want: "type"},
		{name: "unknown group policy", set: "defaultGroupPolicy=groups", want: "defaultGroupPolicy"},
		{name: "unknown source", set: "sources={kubelet,prometheus}", want: "sources"},
		{name: "port out of range", set: "containerPort=70000", want: "containerPort"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := tc.helm.Template(ctx, tc.chartDir, "kube-system", nil, c.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded", c.set)
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template --set %s: want a schema error naming %q, got: %v", c.set, c.want, err)
			}
		})
	}
}

// TestRefusesValuesThatCannotWork: combinations the schema cannot express
// fail with the reason.
func TestRefusesValuesThatCannotWork(t *testing.T) {
	tc := setup(t)
	cases := []struct {
		name string
		sets []string
		want string
	}{
		{name: "hostNetwork on the kubelet's port", sets: []string{"hostNetwork.enabled=true"}, want: "containerPort"},
		{name: "ukpd source without endpoints", sets: []string{"sources={kubelet,ukpd}"}, want: "ukpd.endpoints"},
		{name: "ukpd endpoints without the source", sets: []string{"ukpd.endpoints={https://u:8443}"}, want: "sources"},
		{name: "caBundle the controller writes", sets: []string{"apiService.caBundle=x"}, want: "existingSecret"},
		{name: "serviceMonitor without metrics", sets: []string{"serviceMonitor.enabled=true"}, want: "metrics.enabled"},
		{name: "ExternalName without a name", sets: []string{"service.type=ExternalName"}, want: "service.externalName"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := tc.helm.Template(ctx, tc.chartDir, "kube-system", nil, c.sets...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template --set %v: want an error naming %q, got %v", c.sets, c.want, err)
			}
		})
	}
}

// TestOurValues: the values manifests/ has no kustomization for render
// the args and volumes the server's flags (docs/flags.md) take.
func TestOurValues(t *testing.T) {
	tc := setup(t)
	cases := []struct {
		name     string
		values   string
		sets     []string
		wantArgs []string
		check    func(t *testing.T, spec map[string]any)
	}{
		{
			name:   "ukpd",
			values: "ukpd-values.yaml",
			wantArgs: []string{
				"--sources=kubelet,ukpd",
				"--ukpd-endpoint=https://ukpd.unikraft.example:8443;node-selector=unikraft.com/virtual-kubelet=true",
				"--ukpd-token-file=/var/run/ukpd-credentials/token",
				"--ukpd-certificate-authority=/var/run/ukpd-credentials/ca.crt",
				"--default-group-policy=group",
			},
			check: func(t *testing.T, spec map[string]any) {
				vols, _, _ := unstructured.NestedSlice(spec, "volumes")
				want := []any{
					map[string]any{"name": "serving-cert", "secret": map[string]any{"secretName": "group-metrics-server-serving-cert"}},
					map[string]any{"name": "ukpd-credentials", "secret": map[string]any{"secretName": "ukpd-credentials"}},
				}
				if diff := cmp.Diff(want, vols); diff != "" {
					t.Errorf("volumes (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:     "host network",
			values:   "host-network-values.yaml",
			wantArgs: []string{"--secure-port=4443"},
			check: func(t *testing.T, spec map[string]any) {
				hn, _, _ := unstructured.NestedBool(spec, "hostNetwork")
				dns, _, _ := unstructured.NestedString(spec, "dnsPolicy")
				port, _, _ := unstructured.NestedFieldNoCopy(spec, "containers")
				if !hn || dns != "ClusterFirstWithHostNet" {
					t.Errorf("hostNetwork %v dnsPolicy %q, want true ClusterFirstWithHostNet", hn, dns)
				}
				ctr := port.([]any)[0].(map[string]any)
				if diff := cmp.Diff([]any{map[string]any{"name": "https", "containerPort": float64(4443), "protocol": "TCP"}}, ctr["ports"]); diff != "" {
					t.Errorf("ports (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:     "metrics and args",
			sets:     []string{"metrics.enabled=true", "args={--v=2}"},
			wantArgs: []string{"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var files []string
			if c.values != "" {
				files = []string{filepath.Join(tc.chartDir, "ci", c.values)}
			}
			objs, err := tc.helm.Template(ctx, tc.chartDir, "kube-system", files, c.sets...)
			if err != nil {
				t.Fatal(err)
			}
			spec := serverPodSpec(t, objs)
			ctr := spec["containers"].([]any)[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(ctr, "args")
			base := []string{
				"--metric-resolution=15s", "--kubelet-use-node-status-port",
				"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
				"--tls-cert-file=/var/run/serving-cert/tls.crt", "--tls-private-key-file=/var/run/serving-cert/tls.key",
			}
			want := append([]string{}, base...)
			secure := "--secure-port=10250"
			rest := c.wantArgs
			if len(rest) > 0 && strings.HasPrefix(rest[0], "--secure-port=") {
				secure, rest = rest[0], rest[1:]
			}
			want = append(append([]string{secure}, want...), rest...)
			if diff := cmp.Diff(want, args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if c.check != nil {
				c.check(t, spec)
			}
		})
	}
}

func serverPodSpec(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == chart.Name {
			spec, _, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			if err != nil {
				t.Fatal(err)
			}
			return spec
		}
	}
	t.Fatalf("no Deployment %s", chart.Name)
	return nil
}

// The example values files are documented in the chart's README.
func TestExamplesDocumented(t *testing.T) {
	tc := setup(t)
	readme, err := os.ReadFile(filepath.Join(tc.chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range exampleValues(t, tc) {
		if !strings.Contains(string(readme), "ci/"+filepath.Base(f)) {
			t.Errorf("the chart's README does not mention ci/%s", filepath.Base(f))
		}
	}
}
