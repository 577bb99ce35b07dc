package certs

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestTakeOverFromMetricsServer: an APIService left by metrics-server's
// manifests (insecureSkipTLSVerify, which the API server refuses beside a
// caBundle) but pointing at our Service gets the caBundle and loses the
// flag in one write; one still pointing at metrics-server is left alone.
func TestTakeOverFromMetricsServer(t *testing.T) {
	metricsServer := ServiceRef{Namespace: testNS, Name: "metrics-server", Port: 443}
	dyn := newDynamic(apiService("v1beta1.metrics.k8s.io", ourService, true), apiService("v1.metrics.k8s.io", metricsServer, true))
	r := newRig(clocktesting.NewFakeClock(t0), newKube(), dyn)
	r.sync(t)
	if _, found, _ := unstructured.NestedBool(getAPIService(t, dyn, "v1beta1.metrics.k8s.io").Object, "spec", "insecureSkipTLSVerify"); found {
		t.Error("insecureSkipTLSVerify still set on the APIService that points at our Service")
	}
	if err := verifies(secret(t, r.kube, servingName).Data[KeyServingCert], caBundleOf(t, dyn, "v1beta1.metrics.k8s.io"), t0); err != nil {
		t.Errorf("caBundle does not verify the serving pair: %v", err)
	}
	other := getAPIService(t, dyn, "v1.metrics.k8s.io")
	if b, _, _ := unstructured.NestedString(other.Object, "spec", "caBundle"); b != "" {
		t.Error("wrote a caBundle into an APIService that points at metrics-server")
	}
	if insecure, _, _ := unstructured.NestedBool(other.Object, "spec", "insecureSkipTLSVerify"); !insecure {
		t.Error("changed an APIService that points at metrics-server")
	}

	// Then the user applies our manifests: it points at us, and is taken.
	if err := unstructured.SetNestedField(other.Object, ourService.Name, "spec", "service", "name"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(APIServiceResource).Update(context.Background(), other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.clk.Step(time.Second)
	r.sync(t)
	if err := verifies(secret(t, r.kube, servingName).Data[KeyServingCert], caBundleOf(t, dyn, "v1.metrics.k8s.io"), t0); err != nil {
		t.Errorf("caBundle does not verify the serving pair once the APIService points at us: %v", err)
	}
}

// TestRecreateDeleted: a deleted APIService is created again once it has
// been missing for RecreateAfter, as the manifests define it, labelled and
// owned so that an uninstall removes it.
func TestRecreateDeleted(t *testing.T) {
	dyn := newDynamic(apiService("v1beta1.metrics.k8s.io", ourService, false))
	r := newRig(clocktesting.NewFakeClock(t0), newKube(), dyn)
	for _, step := range []struct {
		after time.Duration
		why   string
	}{{0, "created at once: an uninstall in progress would be undone"}, {9 * time.Second, "created before RecreateAfter"}} {
		r.clk.Step(step.after)
		r.sync(t) // v1 seen missing
		if _, err := dyn.Resource(APIServiceResource).Get(context.Background(), "v1.metrics.k8s.io", metav1.GetOptions{}); err == nil {
			t.Fatal(step.why)
		}
	}
	r.clk.Step(time.Second)
	r.sync(t)
	got, err := dyn.Resource(APIServiceResource).Get(context.Background(), "v1.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("not created again after RecreateAfter: %v", err)
	}
	spec, _, _ := unstructured.NestedMap(got.Object, "spec")
	delete(spec, "caBundle")
	want := map[string]any{
		"group": "metrics.k8s.io", "version": "v1", "groupPriorityMinimum": int64(100), "versionPriority": int64(200),
		"service": map[string]any{"namespace": testNS, "name": ourService.Name, "port": int64(443)},
	}
	if d := cmp.Diff(want, spec); d != "" {
		t.Errorf("recreated spec (-want +got):\n%s", d)
	}
	if got.GetLabels()["app.kubernetes.io/name"] != "group-metrics-server" || len(got.GetOwnerReferences()) != 1 {
		t.Errorf("recreated APIService lacks the label or the owner: %v %v", got.GetLabels(), got.GetOwnerReferences())
	}
	if err := verifies(secret(t, r.kube, servingName).Data[KeyServingCert], caBundleOf(t, dyn, "v1.metrics.k8s.io"), r.clk.Now()); err != nil {
		t.Errorf("recreated caBundle: %v", err)
	}
}

func TestVersionPriority(t *testing.T) {
	for v, want := range map[string]int64{"v1": 200, "v1beta1": 100, "v1beta2": 200} {
		if got := versionPriority(v); got != want {
			t.Errorf("versionPriority(%s) = %d, want %d", v, got, want)
		}
	}
}
