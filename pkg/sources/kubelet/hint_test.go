package kubelet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubelet-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serving issues a kubelet serving certificate for the given SANs, valid
// from notBefore to notAfter.
func (ca *testCA) serving(t *testing.T, dns []string, ips []net.IP, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "node-0"},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestSummaryCertificateHints scrapes a loopback kubelet whose serving
// certificate fails verification in each known way, and checks that the
// error keeps its "tls" reason and carries the hint for that way, which the
// store's reason and the NotFound answer repeat.
func TestSummaryCertificateHints(t *testing.T) {
	trusted, other := newTestCA(t), newTestCA(t)
	now := time.Now()
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	tests := []struct {
		name     string
		cert     tls.Certificate
		wantKind string
		wantHint []string
	}{
		{
			name:     "self-signed style certificate without IP SANs",
			cert:     trusted.serving(t, []string{"node-0"}, nil, now.Add(-time.Hour), now.Add(time.Hour)),
			wantKind: certNoSAN,
			wantHint: []string{"doesn't contain any IP SANs", "serverTLSBootstrap", "--kubelet-preferred-address-types", TroubleshootingDoc},
		},
		{
			name:     "signed by a CA the server does not trust",
			cert:     other.serving(t, nil, loopback, now.Add(-time.Hour), now.Add(time.Hour)),
			wantKind: certUnknownCA,
			wantHint: []string{"unknown authority", "--kubelet-certificate-authority", TroubleshootingDoc},
		},
		{
			name:     "expired",
			cert:     trusted.serving(t, nil, loopback, now.Add(-2*time.Hour), now.Add(-time.Hour)),
			wantKind: certInvalid,
			wantHint: []string{"expired", "serverTLSBootstrap", TroubleshootingDoc},
		},
		{
			name: "valid",
			cert: trusted.serving(t, nil, loopback, now.Add(-time.Hour), now.Add(time.Hour)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"node":{"nodeName":"node-0","startTime":"2026-01-01T00:00:00Z","cpu":{"time":"2026-01-01T00:00:10Z","usageCoreNanoSeconds":1},"memory":{"time":"2026-01-01T00:00:10Z","workingSetBytes":1}},"pods":[]}`))
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{tt.cert}, MinVersion: tls.VersionTLS12}
			srv.StartTLS()
			defer srv.Close()
			c, err := NewClient(ClientConfig{REST: &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: trusted.pem}}})
			if err != nil {
				t.Fatal(err)
			}
			host := strings.TrimPrefix(srv.URL, "https://")
			_, err = c.Summary(context.Background(), "node-0", host)
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
	want := []bool{true, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: first = %v, want %v", i, got[i], want[i])
		}
	}
}
