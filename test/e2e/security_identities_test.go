//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// refusedCredentials are the identities TestRequestsRefused sends.
func refusedCredentials(ctx context.Context, t *testing.T) []credentials {
	t.Helper()
	_, saToken := newServiceAccount(ctx, t, securityNamespace, "no-rbac")
	certPEM, keyPEM := foreignClientCert(t)
	return []credentials{
		{name: "anonymous", set: func(*rest.Config) {}, want: http.StatusForbidden},
		{name: "unknown-token", set: func(c *rest.Config) { c.BearerToken = "e2e-not-a-token-" + randomHex(t) }, want: http.StatusUnauthorized},
		{name: "forged-token", set: func(c *rest.Config) { c.BearerToken = forgedToken(t) }, want: http.StatusUnauthorized},
		{name: "no-rbac-serviceaccount", set: func(c *rest.Config) { c.BearerToken = saToken }, want: http.StatusForbidden},
		{name: "foreign-client-cert", set: func(c *rest.Config) { c.CertData, c.KeyData = certPEM, keyPEM }, want: http.StatusUnauthorized},
	}
}

// newServiceAccount creates a ServiceAccount, bound to no role, and returns
// its kubeconfig and token.
func newServiceAccount(ctx context.Context, t *testing.T, ns, name string) (kubeconfig, token string) {
	t.Helper()
	_, err := suite.cluster.Client().CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	kubeconfig, err = suite.cluster.ServiceAccountKubeconfig(ctx, ns, name)
	must(t, err)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	must(t, err)
	return kubeconfig, cfg.BearerToken
}

// foreignClientCert returns a client certificate for the cluster admin's
// name and group, signed by a CA the cluster has never seen.
func foreignClientCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("e2e-foreign-ca", now, time.Hour)
	must(t, err)
	certPEM, keyPEM, err = ca.Issue(now, pki.Leaf{CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Client: true})
	must(t, err)
	return certPEM, keyPEM
}

// forgedToken is a well-formed ES256 JWT claiming to be the server's
// ServiceAccount, signed with a key nobody trusts.
func forgedToken(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	enc := base64.RawURLEncoding
	now := time.Now().Unix()
	claims := fmt.Sprintf(`{"iss":%q,"sub":"system:serviceaccount:%s:%s","aud":[%q],"iat":%d,"nbf":%d,"exp":%d}`,
		suite.cluster.APIServerURL(), suite.server.Namespace, suite.server.ServiceAccount, suite.cluster.APIServerURL(), now, now, now+3600)
	signed := enc.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT","kid":"e2e-forged"}`)) + "." + enc.EncodeToString([]byte(claims))
	digest := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	must(t, err)
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + enc.EncodeToString(sig)
}
