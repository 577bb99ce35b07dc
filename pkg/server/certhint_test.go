package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
)

// TestKubeletCertificateHintInNotFound runs a server whose node n2 has a
// kubelet certificate without IP SANs (dialled at 127.0.0.1): a get of a pod
// on n2 is a NotFound StatusError whose message names the x509 error and its
// fix, while n1's pods are served.
func TestKubeletCertificateHintInNotFound(t *testing.T) {
	env := startServer(t, "n2")
	mc := metricsClient(t, env.admin, "application/json")
	ctx := context.Background()
	if _, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod on the healthy node n1: %v", err)
	}
	_, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "web-2", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("pod on n2: %v, want NotFound", err)
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) {
		t.Fatalf("pod on n2: %T is not a StatusError", err)
	}
	msg := status.ErrStatus.Message
	for _, want := range []string{`node "n2" is unreachable`, "doesn't contain any IP SANs", "serverTLSBootstrap", "--kubelet-preferred-address-types", kubelet.TroubleshootingDoc} {
		if !strings.Contains(msg, want) {
			t.Errorf("NotFound message lacks %q:\n%s", want, msg)
		}
	}
}
