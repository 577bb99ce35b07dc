package certs

import (
	"context"
	"encoding/base64"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func TestCABundleWriter(t *testing.T) {
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": "v1.metrics.k8s.io"},
		"spec":       map[string]any{"group": "metrics.k8s.io", "version": "v1"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{apiServices: "APIServiceList"}, svc)
	w := &CABundleWriter{Client: client, Names: []string{"v1.metrics.k8s.io", "v1beta1.metrics.k8s.io"}, CA: []byte("-----BEGIN CERTIFICATE-----\n")}

	// The missing v1beta1 is an error; v1 is written regardless.
	if err := w.Sync(context.Background()); err == nil {
		t.Error("Sync with a missing APIService returned no error")
	}
	got, err := client.Resource(apiServices).Get(context.Background(), "v1.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, _, _ := unstructured.NestedString(got.Object, "spec", "caBundle")
	if bundle != base64.StdEncoding.EncodeToString(w.CA) {
		t.Fatalf("caBundle = %q, want the CA", bundle)
	}

	// Once equal, nothing is patched.
	w.Names = w.Names[:1]
	before := len(client.Actions())
	if err := w.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions()[before:] {
		if a.GetVerb() == "patch" {
			t.Errorf("patched an APIService whose caBundle was already right")
		}
	}
}
