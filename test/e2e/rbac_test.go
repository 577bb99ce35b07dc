//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// TestAuthorization checks that an identity without RBAC for metrics.k8s.io is refused, through the
// aggregator and by the server itself, and is allowed once bound to system:aggregated-metrics-reader.
func TestAuthorization(t *testing.T) {
	ctx := begin(t, 2*time.Minute)
	const ns, sa = "e2e-rbac", "reader"
	newNamespace(ctx, t, ns)
	token := newServiceAccount(ctx, t, ns, sa)
	paths := []string{"/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods", "/apis/metrics.k8s.io/v1/nodes"}
	var eps []endpoint
	for _, via := range vias(suite.server) {
		eps = append(eps, via.endpoint(t, func(c *rest.Config) { c.BearerToken = token }))
	}
	// check reports nil when every path answers want, through the aggregator and directly.
	check := func(ctx context.Context, want int) error {
		for _, ep := range eps {
			for _, p := range paths {
				code, body, err := env.Get(ctx, ep.client, ep.base+p)
				if err == nil && code != want {
					err = fmt.Errorf("%s, GET %s: status %d, want %d: %.200s", ep.name, p, code, want, body)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := check(ctx, http.StatusForbidden); err != nil {
		t.Fatalf("without RBAC: %v", err)
	}

	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregated-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	client := suite.cluster.Client()
	_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// The server caches a refusal for --authorization-webhook-cache-unauthorized-ttl (10s).
	began := time.Now()
	must(t, poll(ctx, "the bound identity to be allowed", func(ctx context.Context) error { return check(ctx, http.StatusOK) }))
	t.Logf("allowed %v after the binding was created", time.Since(began).Round(time.Millisecond))
}

// reviewResources are what every authenticated identity, or the auth-delegator role, may create: questions to
// the API server, which store nothing.
var reviewResources = []string{"tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews"}

// TestKubeletCredentialReadOnly asks the API server, with each credential the fake kubelets received, what it
// may do: read only.
func TestKubeletCredentialReadOnly(t *testing.T) {
	ctx := begin(t, 2*time.Minute)
	// The tokens come with the server's scrapes, and an Available server may not have scraped yet when this
	// test is the first to run: wait for its first scrape, within readyBound and ten seconds for a loaded
	// machine.
	var tokens []string
	must(t, pollBounded(ctx, readyBound()+10*time.Second, "the fleet to accept a bearer token", func(context.Context) error {
		tokens = suite.fleet.PresentedTokens()
		return wantf(len(tokens) > 0, "the fleet has accepted no bearer token: the server scrapes with none")
	}))
	nsList, err := suite.cluster.Client().CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	must(t, err)
	for i, token := range tokens {
		admin := suite.cluster.RESTConfig()
		cfg := &rest.Config{Host: admin.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: admin.CAFile, CAData: admin.CAData}}
		client, err := kubernetes.NewForConfig(cfg)
		must(t, err)
		who, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token %d: who am I: %v", i, err)
		}
		user := who.Status.UserInfo.Username
		rules := 0
		for _, ns := range nsList.Items {
			rev, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
				&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns.Name}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: rules review in %s: %v", user, ns.Name, err)
			}
			if rev.Status.Incomplete {
				t.Errorf("%s: rules review in %s is incomplete: %s", user, ns.Name, rev.Status.EvaluationError)
			}
			for _, r := range rev.Status.ResourceRules {
				rules++
				for _, v := range r.Verbs {
					if !slices.Contains(readVerbs, v) && (v != "create" || !onlyReviews(r.Resources)) {
						t.Errorf("%s may %s %v %v %v in %s", user, v, r.APIGroups, r.Resources, r.ResourceNames, ns.Name)
					}
				}
			}
			for _, r := range rev.Status.NonResourceRules {
				if slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" }) {
					t.Errorf("%s may %v %v", user, r.Verbs, r.NonResourceURLs)
				}
			}
		}

		_, createErr := client.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-e2e000"}, Type: corev1.SecretTypeBootstrapToken,
		}, metav1.CreateOptions{})
		dyn, err := dynamic.NewForConfig(cfg)
		must(t, err)
		_, patchErr := dyn.Resource(certs.APIServiceResource).Patch(ctx, "v1beta1.metrics.k8s.io", types.MergePatchType,
			[]byte(`{"spec":{"service":{"name":"elsewhere"}}}`), metav1.PatchOptions{})
		for what, err := range map[string]error{"create a Secret in kube-system": createErr, "patch APIService v1beta1.metrics.k8s.io": patchErr} {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: %s: got %v, want Forbidden", user, what, err)
			}
		}
		t.Logf("credential %d the kubelets received: %s, %d resource rules over %d namespaces, all read-only; Secret create and APIService patch Forbidden",
			i, user, rules, len(nsList.Items))
	}
}

func onlyReviews(resources []string) bool {
	return len(resources) > 0 && !slices.ContainsFunc(resources, func(r string) bool { return !slices.Contains(reviewResources, r) })
}
