package lws

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

const webhookManifests = `apiVersion: v1
kind: Service
metadata:
  name: webhook-service
  namespace: system
spec:
  ports:
  - port: 443
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /mutate--v1-pod
  failurePolicy: Fail
  name: mpod.kb.io
  objectSelector:
    matchExpressions:
    - key: leaderworkerset.sigs.k8s.io/name
      operator: Exists
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-leaderworkerset-x-k8s-io-v1-leaderworkerset
  name: vleaderworkerset.kb.io
  sideEffects: None
`

func TestWebhookConfigurations(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\n")
	items, err := webhookConfigurations([]byte(webhookManifests), "https://127.0.0.1:9443", ca)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 {
		t.Fatalf("got %d items, want 2", len(items))
	}
	type webhook struct {
		Name           string
		ClientConfig   admissionregistrationv1.WebhookClientConfig
		ObjectSelector *metav1.LabelSelector
	}
	type configuration struct {
		Kind     string
		Metadata metav1.ObjectMeta
		Webhooks []webhook
	}
	want := func(kind, name, webhookName, path string, selector *metav1.LabelSelector) configuration {
		return configuration{kind, metav1.ObjectMeta{Name: name}, []webhook{{webhookName, admissionregistrationv1.WebhookClientConfig{
			URL: ptr.To("https://127.0.0.1:9443" + path), CABundle: ca}, selector}}}
	}
	podSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: NameLabel, Operator: metav1.LabelSelectorOpExists}}}
	for i, tt := range []struct {
		name string
		want configuration
	}{
		{"mutating", want("MutatingWebhookConfiguration", "lws-mutating-webhook-configuration", "mpod.kb.io", "/mutate--v1-pod", podSelector)},
		{"validating", want("ValidatingWebhookConfiguration", "lws-validating-webhook-configuration", "vleaderworkerset.kb.io",
			"/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data, err := json.Marshal(items[i])
			var got configuration
			if err == nil {
				err = json.Unmarshal(data, &got)
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("configuration (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWebhookConfigurationsErrors(t *testing.T) {
	tests := []struct {
		name      string
		manifests string
		want      string
	}{
		{name: "no configurations", manifests: "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n", want: "found 0"},
		{
			name: "webhook without service",
			manifests: strings.Replace(webhookManifests, `    service:
      name: webhook-service
      namespace: system
      path: /mutate--v1-pod`, "    url: https://example.invalid/", 1),
			want: "mpod.kb.io has no service path",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := webhookConfigurations([]byte(tt.manifests), "https://127.0.0.1:1", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNewLeaderWorkerSet(t *testing.T) {
	tests := []struct {
		name              string
		cpu               string
		leaderAnnotations map[string]string
		wantLeader        bool
	}{
		{name: "shared template", cpu: "250m"},
		{name: "leader template", cpu: "1", leaderAnnotations: map[string]string{"a": "b"}, wantLeader: true},
		{name: "no request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := NewLeaderWorkerSet("ns", "x", 3, 4, tt.cpu, tt.leaderAnnotations)
			// Unstructured objects must survive DeepCopy, which panics on
			// values JSON could not hold (int32, for instance).
			obj = obj.DeepCopy()
			template := func(path ...string) []string { return append([]string{"spec", "leaderWorkerTemplate"}, path...) }
			replicas, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
			size, _, _ := unstructured.NestedInt64(obj.Object, template("size")...)
			containers, _, _ := unstructured.NestedSlice(obj.Object, template("workerTemplate", "spec", "containers")...)
			if len(containers) != 1 {
				t.Fatalf("worker containers: %v", containers)
			}
			cpu, _, _ := unstructured.NestedString(containers[0].(map[string]any), "resources", "requests", "cpu")
			annotations, hasLeader, _ := unstructured.NestedStringMap(obj.Object, template("leaderTemplate", "metadata", "annotations")...)
			// kind, namespace/name, replicas, size, CPU request, leader template, its annotations
			want := []any{"LeaderWorkerSet", "ns/x", int64(3), int64(4), tt.cpu, tt.wantLeader, tt.leaderAnnotations}
			got := []any{obj.GetKind(), obj.GetNamespace() + "/" + obj.GetName(), replicas, size, cpu, hasLeader, annotations}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("LeaderWorkerSet (-want +got):\n%s", diff)
			}
		})
	}
}
