//go:build chart

package chart_test

import "testing"

// TestChartMatchesManifests renders the chart (as release
// group-metrics-server in kube-system) with default values and with each
// example values file that stands for a kustomization of manifests/, and
// that kustomization, and compares the objects: the same set, equal but
// for the labels only the chart adds, and, for those with the pod-endpoint
// source, but for what samePodMetrics sets aside.
func TestChartMatchesManifests(t *testing.T) {
	tc := setup(t)
	cases := []struct {
		name          string
		values        string
		kustomization string
		// podMetrics: both render a pod-metrics file, compared parsed
		// (samePodMetrics).
		podMetrics bool
	}{
		{name: "default", kustomization: "manifests/base"},
		{name: "high-availability", values: "high-availability-values.yaml", kustomization: "manifests/high-availability"},
		{name: "custom-metrics", values: "custom-metrics-values.yaml", kustomization: "manifests/custom-metrics"},
		{name: "cert-manager", values: "cert-manager-values.yaml", kustomization: "manifests/examples/cert-manager"},
		{name: "serving-cert-files", values: "serving-cert-files-values.yaml", kustomization: "manifests/examples/serving-cert-files"},
		{name: "network-policy", values: "network-policy-values.yaml", kustomization: "manifests/examples/network-policy"},
		{name: "ukpd-relays", values: "ukpd-relays-values.yaml", kustomization: "manifests/examples/ukpd-relays"},
		{name: "kubelet-resource-endpoint", values: "kubelet-resource-endpoint-values.yaml", kustomization: "manifests/examples/kubelet-resource-endpoint"},
		{name: "scale-to-zero", values: "scale-to-zero-values.yaml", kustomization: "manifests/examples/scale-to-zero", podMetrics: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.podMetrics {
				tc.samePodMetrics(t, c.values, c.kustomization)
				return
			}
			tc.sameAsKustomize(t, c.values, c.kustomization, nil)
		})
	}
}
