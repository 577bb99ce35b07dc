package fakekubelet

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

type staticAuthenticator map[string]bool

func (a staticAuthenticator) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	return &authenticator.Response{}, a[token], nil
}

func TestAuthentication(t *testing.T) {
	clientCA := otherCA(t)
	stranger := otherCA(t)
	f, _ := newTestFleet(t, Config{
		Tokens:             []string{testToken, "second-token"},
		ClientCAPEM:        clientCA.CertPEM(),
		TokenAuthenticator: staticAuthenticator{"reviewed-token": true},
	})
	n := addNode(t, f, "node-a")

	fleetCert, fleetKey, err := f.IssueClientCertificate("scraper", "system:monitoring")
	must(t, err)
	caCert, caKey, err := clientCA.Issue(t0, pki.Leaf{CommonName: "scraper", Client: true})
	must(t, err)
	strangerCert, strangerKey, err := stranger.Issue(t0, pki.Leaf{CommonName: "intruder", Client: true})
	must(t, err)

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
		{name: "token", header: "Bearer " + testToken, path: "/stats/summary", want: http.StatusOK},
		{name: "second token on metrics", header: "Bearer second-token", path: "/metrics/resource", want: http.StatusOK},
		{name: "lower-case scheme", header: "bearer " + testToken, path: "/stats/summary", want: http.StatusOK},
		{name: "token accepted by authenticator", header: "Bearer reviewed-token", path: "/stats/summary", want: http.StatusOK},
		{name: "client cert from fleet CA", certs: []tls.Certificate{clientCertificate(t, fleetCert, fleetKey)}, path: "/stats/summary", want: http.StatusOK},
		{name: "client cert from configured CA", certs: []tls.Certificate{clientCertificate(t, caCert, caKey)}, path: "/metrics/resource", want: http.StatusOK},
		{name: "client cert from unknown CA", certs: []tls.Certificate{clientCertificate(t, strangerCert, strangerKey)}, path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "unknown CA cert with good token", certs: []tls.Certificate{clientCertificate(t, strangerCert, strangerKey)}, header: "Bearer " + testToken, path: "/stats/summary", want: http.StatusOK},
		{name: "unknown path", header: "Bearer " + testToken, path: "/pods", want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, f, tt.certs...)
			req, err := http.NewRequest(http.MethodGet, n.URL()+tt.path, nil)
			must(t, err)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			resp, err := c.Do(req.WithContext(ctx))
			must(t, err)
			resp.Body.Close()
			if diff := cmp.Diff(tt.want, resp.StatusCode); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServingCertificate(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	for _, serverName := range []string{"127.0.0.1", "localhost", "node-a"} {
		t.Run(serverName, func(t *testing.T) {
			conn, err := tls.Dial("tcp", n.Address(), &tls.Config{RootCAs: certPool(f), ServerName: serverName, MinVersion: tls.VersionTLS12})
			if err != nil {
				t.Fatalf("TLS with server name %q: %v", serverName, err)
			}
			conn.Close()
		})
	}
	if _, err := tls.Dial("tcp", n.Address(), &tls.Config{RootCAs: certPool(f), ServerName: "node-b", MinVersion: tls.VersionTLS12}); err == nil {
		t.Error("certificate of node-a verified for node-b")
	}
}
