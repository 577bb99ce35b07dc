package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// TestSummaryCertificateHints scrapes a loopback kubelet whose serving
// certificate fails verification in each known way, and checks that the
// error keeps its "tls" reason and carries the hint for that way, which the
// store's reason and the NotFound answer repeat.
func TestSummaryCertificateHints(t *testing.T) {
	now := time.Now()
	ca := func(at time.Time) *pki.CA {
		ca, err := pki.NewCA("kubelet-ca", at, time.Hour)
		must(t, err)
		return ca
	}
	// expired's certificates end an hour ago; the client trusts it too.
	trusted, other, expired := ca(now), ca(now), ca(now.Add(-2*time.Hour))
	serving := func(ca *pki.CA, hosts ...string) tls.Certificate {
		c, err := ca.TLSCertificate(now, pki.Leaf{CommonName: "node-0", Hosts: hosts, Server: true})
		must(t, err)
		return c
	}
	tests := []struct {
		name     string
		cert     tls.Certificate
		wantKind string
		wantHint []string
	}{
		{
			name:     "self-signed style certificate without IP SANs",
			cert:     serving(trusted, "node-0"),
			wantKind: certNoSAN,
			wantHint: []string{"doesn't contain any IP SANs", "serverTLSBootstrap", "--kubelet-preferred-address-types", TroubleshootingDoc},
		},
		{
			name:     "signed by a CA the server does not trust",
			cert:     serving(other, "127.0.0.1"),
			wantKind: certUnknownCA,
			wantHint: []string{"unknown authority", "--kubelet-certificate-authority", TroubleshootingDoc},
		},
		{name: "expired", cert: serving(expired, "127.0.0.1"), wantKind: certInvalid, wantHint: []string{"expired", "serverTLSBootstrap", TroubleshootingDoc}},
		{name: "valid", cert: serving(trusted, "127.0.0.1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"node":{"nodeName":"node-0","startTime":"2026-01-01T00:00:00Z","cpu":{"time":"2026-01-01T00:00:10Z","usageCoreNanoSeconds":1},"memory":{"time":"2026-01-01T00:00:10Z","workingSetBytes":1}},"pods":[]}`))
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{tt.cert}, MinVersion: tls.VersionTLS12}
			srv.StartTLS()
			defer srv.Close()
			c, err := NewClient(ClientConfig{REST: &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: append(trusted.CertPEM(), expired.CertPEM()...)}}})
			must(t, err)
			host := strings.TrimPrefix(srv.URL, "https://")
			_, err = c.Summary(t.Context(), "node-0", host)
			if tt.wantKind == "" {
				if err != nil {
					t.Fatalf("Summary: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Summary succeeded, want a certificate error")
			}
			if got := sources.Reason(err); got != sources.ReasonTLS {
				t.Errorf("Reason = %q, want %q", got, sources.ReasonTLS)
			}
			if got := certFailure(err); got != tt.wantKind {
				t.Errorf("certFailure = %q, want %q", got, tt.wantKind)
			}
			for _, w := range tt.wantHint {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if c.hints.first(tt.wantKind) {
				t.Errorf("kind %q not marked as logged after the first failure", tt.wantKind)
			}
		})
	}
}

func TestWithHintPassesOtherErrors(t *testing.T) {
	var h hinter
	for _, err := range []error{context.DeadlineExceeded, &net.OpError{Op: "dial", Err: &net.AddrError{Err: "refused"}}} {
		got := h.withHint("node-0", "127.0.0.1:1", err)
		var hinted *certHintError
		if errors.As(got, &hinted) || got.Error() != err.Error() {
			t.Errorf("withHint(%v) = %v, want the error unchanged", err, got)
		}
	}
	if len(h.logged) != 0 {
		t.Errorf("logged %v for errors that are not certificate failures", h.logged)
	}
}

func TestHinterLogsEachKindOnce(t *testing.T) {
	var h hinter
	got := []bool{h.first(certNoSAN), h.first(certNoSAN), h.first(certUnknownCA), h.first(certNoSAN)}
	if diff := cmp.Diff([]bool{true, false, true, false}, got); diff != "" {
		t.Errorf("first (-want +got):\n%s", diff)
	}
}
