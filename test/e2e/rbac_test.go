//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// TestAuthorization checks that an identity without RBAC for metrics.k8s.io
// is refused, through the aggregator and by the server itself, and is
// allowed once bound to system:aggregated-metrics-reader.
func TestAuthorization(t *testing.T) {
	ctx := begin(t, 2*time.Minute)
	const ns, sa = "e2e-rbac", "reader"
	newNamespace(ctx, t, ns)
	kubeconfig, token := newServiceAccount(ctx, t, ns, sa)
	direct := suite.server.RESTConfig()
	direct.CertData, direct.KeyData, direct.CertFile, direct.KeyFile = nil, nil, "", ""
	direct.BearerToken = token
	directClient, err := rest.HTTPClientFor(direct)
	must(t, err)

	paths := []string{"/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods", "/apis/metrics.k8s.io/v1/nodes"}
	// check reports nil when every path answers as allowed says.
	check := func(ctx context.Context, allowed bool) error {
		for _, p := range paths {
			_, _, err := suite.cluster.Kubectl(ctx, "--kubeconfig="+kubeconfig, "get", "--raw", p)
			switch {
			case allowed && err != nil:
				return fmt.Errorf("through the aggregator: %w", err)
			case !allowed && err == nil:
				return fmt.Errorf("through the aggregator, GET %s: allowed, want Forbidden", p)
			case !allowed && !strings.Contains(err.Error(), "Forbidden"):
				return fmt.Errorf("through the aggregator, GET %s: want Forbidden, got %w", p, err)
			}
			code, body, err := env.Get(ctx, directClient, direct.Host+p)
			if err != nil {
				return err
			}
			want := http.StatusForbidden
			if allowed {
				want = http.StatusOK
			}
			if code != want {
				return fmt.Errorf("directly, GET %s: status %d, want %d: %.200s", p, code, want, body)
			}
		}
		return nil
	}
	if err := check(ctx, false); err != nil {
		t.Fatalf("without RBAC: %v", err)
	}

	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregated-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	client := suite.cluster.Client()
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// The server caches a refusal for --authorization-webhook-cache-unauthorized-ttl (10s).
	began := time.Now()
	must(t, poll(ctx, "the bound identity to be allowed", func(ctx context.Context) error { return check(ctx, true) }))
	t.Logf("allowed %v after the binding was created", time.Since(began).Round(time.Millisecond))
}
