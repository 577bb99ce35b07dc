package fakekubelet

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

func TestAuthentication(t *testing.T) {
	clientCA, err := pki.NewCA("client-ca", t0, fakecore.CAValidity)
	must(t, err)
	stranger, err := pki.NewCA("stranger-ca", t0, fakecore.CAValidity)
	must(t, err)
	f, _ := newTestFleet(t, Config{
		Tokens:      []string{testToken, "second-token"},
		ClientCAPEM: clientCA.CertPEM(),
		TokenAuthenticator: authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
			return &authenticator.Response{}, token == "reviewed-token", nil
		}),
	})
	n := addNode(t, f, "node-a")
	keyPair := func(certPEM, keyPEM []byte, err error) []tls.Certificate {
		must(t, err)
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		must(t, err)
		return []tls.Certificate{c}
	}
	fleetCert := keyPair(f.IssueClientCertificate("scraper", "system:monitoring"))
	caCert := keyPair(clientCA.Issue(t0, pki.Leaf{CommonName: "scraper", Client: true}))
	strangerCert := keyPair(stranger.Issue(t0, pki.Leaf{CommonName: "intruder", Client: true}))

	tests := []struct {
		name   string
		certs  []tls.Certificate
		header string
		path   string
		want   int
	}{
		{name: "no credentials", path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "no credentials on metrics", path: "/metrics/resource", want: http.StatusUnauthorized},
		{name: "wrong token", header: "Bearer nope", path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "empty bearer", header: "Bearer ", path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "basic scheme", header: "Basic " + testToken, path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "token", header: bearerAuth, path: "/stats/summary", want: http.StatusOK},
		{name: "second token on metrics", header: "Bearer second-token", path: "/metrics/resource", want: http.StatusOK},
		{name: "lower-case scheme", header: "bearer " + testToken, path: "/stats/summary", want: http.StatusOK},
		{name: "token accepted by authenticator", header: "Bearer reviewed-token", path: "/stats/summary", want: http.StatusOK},
		{name: "client cert from fleet CA", certs: fleetCert, path: "/stats/summary", want: http.StatusOK},
		{name: "client cert from configured CA", certs: caCert, path: "/metrics/resource", want: http.StatusOK},
		{name: "client cert from unknown CA", certs: strangerCert, path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "unknown CA cert with good token", certs: strangerCert, header: bearerAuth, path: "/stats/summary", want: http.StatusOK},
		{name: "unknown path", header: bearerAuth, path: "/pods", want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, err := get(t, newClient(t, f, tt.certs...), n, tt.path, tt.header)
			must(t, err)
			if diff := cmp.Diff(tt.want, code); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServingCertificate(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	for _, serverName := range []string{"127.0.0.1", "localhost", "node-a", "node-b"} {
		t.Run(serverName, func(t *testing.T) {
			conn, err := tls.Dial("tcp", n.Address(), &tls.Config{RootCAs: certPool(f), ServerName: serverName, MinVersion: tls.VersionTLS12})
			if want := serverName != "node-b"; want != (err == nil) {
				t.Fatalf("TLS with server name %q: %v; want it to verify: %v", serverName, err, want)
			}
			if err == nil {
				conn.Close()
			}
		})
	}
}
