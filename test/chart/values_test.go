//go:build chart

package chart_test

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
)

// TestLint runs helm lint --strict and helm template with default values
// and with each example values file.
func TestLint(t *testing.T) {
	tc := setup(t)
	for _, values := range append([]string{""}, tc.exampleValues(t)...) {
		name := values
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			if out, err := tc.run(t, values, nil, "lint", "--strict"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			objs := tc.render(t, values)
			if len(objs) == 0 {
				t.Fatal("rendered no object")
			}
			for _, o := range objs {
				if v, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "insecureSkipTLSVerify"); found && o.GetKind() == "APIService" {
					t.Errorf("%s has insecureSkipTLSVerify %v", o.GetName(), v)
				}
			}
		})
	}
}

// TestDefaultObjectCount logs how many objects the default values render,
// and checks them against manifests/base's kinds.
func TestDefaultObjectCount(t *testing.T) {
	objs := setup(t).render(t, "")
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
	setup(t).testRefusals(t, []refusal{
		{name: "top-level typo", sets: []string{"replica=2"}, want: "replica"},
		{name: "nested typo", sets: []string{"image.tags=v1"}, want: "tags"},
		{name: "typo under tls", sets: []string{"tls.certManger.duration=1h"}, want: "certManger"},
		{name: "typo under ukpd", sets: []string{"ukpd.endpoint=https://u"}, want: "endpoint"},
		{name: "typo under ukpdRelay", sets: []string{"ukpdRelay.hostSelectors.a=b"}, want: "hostSelectors"},
		{name: "typo under certController", sets: []string{"certController.replica=2"}, want: "replica"},
		{name: "typo under podDisruptionBudget", sets: []string{"podDisruptionBudget.minAvailabe=1"}, want: "minAvailabe"},
		{name: "typo under podMetrics.endpointPickers", sets: []string{"podMetrics.endpointPickers.tokenAudiences=x"}, want: "tokenAudiences"},
		{name: "token lifetime under the API server's minimum", sets: []string{"podMetrics.endpointPickers.tokenExpirationSeconds=300"}, want: "tokenExpirationSeconds"},
		{name: "wrong type", sets: []string{"replicas=two"}, want: "replicas"},
		{name: "unknown tls type", sets: []string{"tls.type=helm"}, want: "type"},
		{name: "unknown group policy", sets: []string{"defaultGroupPolicy=groups"}, want: "defaultGroupPolicy"},
		{name: "unknown kubelet endpoint", sets: []string{"kubeletEndpoint=/stats/summary"}, want: "kubeletEndpoint"},
		{name: "unknown source", sets: []string{"sources={kubelet,prometheus}"}, want: "sources"},
		{name: "port out of range", sets: []string{"containerPort=70000"}, want: "containerPort"},
	}, "schema")
}

// TestRefusesValuesThatCannotWork: combinations the schema cannot express
// fail with the reason.
func TestRefusesValuesThatCannotWork(t *testing.T) {
	setup(t).testRefusals(t, []refusal{
		{name: "hostNetwork on the kubelet's port", sets: []string{"hostNetwork.enabled=true"}, want: "containerPort"},
		{name: "ukpd source without endpoints", sets: []string{"sources={kubelet,ukpd}"}, want: "ukpd.endpoints"},
		{name: "ukpd endpoints without the source", sets: []string{"ukpd.endpoints={https://u:8443}"}, want: "sources"},
		{name: "resource endpoint with ukpd relays", sets: []string{"kubeletEndpoint=resource", "ukpdRelay.enabled=true"}, want: "kubeletEndpoint"},
		{name: "caBundle the controller writes", sets: []string{"apiService.caBundle=x"}, want: "existingSecret"},
		{name: "serviceMonitor without metrics", sets: []string{"serviceMonitor.enabled=true"}, want: "metrics.enabled"},
		{name: "ExternalName without a name", sets: []string{"service.type=ExternalName"}, want: "service.externalName"},
	})
}

// TestOurValues: the values manifests/ has no kustomization for render
// the args and volumes the server's flags (docs/flags.md) take.
func TestOurValues(t *testing.T) {
	tc := setup(t)
	cases := []struct {
		name     string
		values   string
		sets     []string
		port     string // --secure-port, 10250 when empty
		wantArgs []string
		// wantSpec holds pod spec fields, and the server container's
		// "ports", that must render as given.
		wantSpec map[string]any
	}{
		{
			name:   "ukpd",
			values: "ukpd-values.yaml",
			sets:   []string{"ukpd.caKey=ca.crt"},
			wantArgs: []string{
				"--sources=kubelet,ukpd",
				"--ukpd-endpoint=https://api.fra.unikraft.cloud",
				"--ukpd-token-file=/var/run/ukpd-credentials/token",
				"--ukpd-certificate-authority=/var/run/ukpd-credentials/ca.crt",
				"--default-group-policy=group",
			},
			wantSpec: map[string]any{"volumes": []any{
				map[string]any{"name": "serving-cert", "secret": map[string]any{"secretName": "group-metrics-server-serving-cert"}},
				map[string]any{"name": "ukpd-credentials", "secret": map[string]any{"secretName": "ukpd-credentials"}},
			}},
		},
		{
			// Relays with a pair per host (verified for each node's
			// address) beside an account endpoint, ukpd first.
			name: "ukpd relays with per-host pairs",
			sets: []string{
				"ukpdRelay.enabled=true", "ukpdRelay.serverName=", "ukpdRelay.caConfigMap=relays-ca",
				"sources={ukpd,kubelet}", "ukpd.endpoints={https://api.fra.unikraft.cloud}",
			},
			wantArgs: []string{
				"--sources=ukpd,kubelet",
				"--ukpd-endpoint=https://api.fra.unikraft.cloud",
				"--ukpd-relay-port=45242",
				"--ukpd-relay-certificate-authority=/var/run/ukpd-relay-ca/ca.crt",
			},
			wantSpec: map[string]any{"volumes": []any{
				map[string]any{"name": "serving-cert", "secret": map[string]any{"secretName": "group-metrics-server-serving-cert"}},
				map[string]any{"name": "ukpd-relay-ca", "configMap": map[string]any{"name": "relays-ca"}},
			}},
		},
		{
			name:   "host network",
			values: "host-network-values.yaml",
			port:   "4443",
			wantSpec: map[string]any{"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet",
				"ports": []any{map[string]any{"name": "https", "containerPort": float64(4443), "protocol": "TCP"}}},
		},
		{
			name:     "metrics and args",
			sets:     []string{"metrics.enabled=true", "args={--v=2}"},
			wantArgs: []string{"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := podSpec(t, tc.render(t, c.values, c.sets...), chart.Name)
			ctr := spec["containers"].([]any)[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(ctr, "args")
			if c.port == "" {
				c.port = "10250"
			}
			want := append([]string{
				"--secure-port=" + c.port, "--metric-resolution=15s", "--kubelet-use-node-status-port",
				"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
				"--tls-cert-file=/var/run/serving-cert/tls.crt", "--tls-private-key-file=/var/run/serving-cert/tls.key",
			}, c.wantArgs...)
			if diff := cmp.Diff(want, args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			spec["ports"] = ctr["ports"]
			got := maps.Clone(c.wantSpec)
			for k := range got {
				got[k] = spec[k]
			}
			if diff := cmp.Diff(c.wantSpec, got); diff != "" {
				t.Errorf("pod spec (-want +got):\n%s", diff)
			}
		})
	}
}

// podSpec is the pod spec of Deployment name in objs.
func podSpec(t *testing.T, objs []*unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == name {
			spec, _, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			if err != nil {
				t.Fatal(err)
			}
			return spec
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

// The example values files are documented in the chart's README.
func TestExamplesDocumented(t *testing.T) {
	tc := setup(t)
	readme, err := os.ReadFile(filepath.Join(tc.chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tc.exampleValues(t) {
		if !strings.Contains(string(readme), "ci/"+f) {
			t.Errorf("the chart's README does not mention ci/%s", f)
		}
	}
}
