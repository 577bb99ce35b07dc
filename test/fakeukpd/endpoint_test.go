package fakeukpd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

func TestEndpointTransportFaults(t *testing.T) {
	tests := []struct {
		kind  FaultKind
		check func(t *testing.T, err error)
	}{
		{kind: fakecore.FaultRefused, check: func(t *testing.T, err error) {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("got %v; want connection refused", err)
			}
		}},
		{kind: fakecore.FaultUntrustedCertificate, check: func(t *testing.T, err error) {
			var unknown x509.UnknownAuthorityError
			if !errors.As(err, &unknown) {
				t.Errorf("got %v; want an unknown authority", err)
			}
		}},
		{kind: fakecore.FaultWrongNameCertificate, check: func(t *testing.T, err error) {
			var host x509.HostnameError
			if !errors.As(err, &host) {
				t.Errorf("got %v; want a hostname mismatch", err)
			}
		}},
		{kind: fakecore.FaultHandshakeStall, check: func(t *testing.T, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v; want the request's deadline to pass", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			r, err := Start(Options{Config: Config{Tokens: []string{token}}, CertDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			ep := r.api
			caPEM, err := os.ReadFile(r.CAFile)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(caPEM)
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
			t.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr}
			get := func(d time.Duration) (int, error) {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ep.Addr()+listPath, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := c.Do(req)
				if err != nil {
					return 0, err
				}
				defer func() { _ = resp.Body.Close() }()
				_, err = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode, err
			}
			addr := ep.Addr()
			// A connection made before the fault must not outlive it.
			if code, err := get(30 * time.Second); err != nil || code != http.StatusOK {
				t.Fatalf("before the fault: %d, %v", code, err)
			}
			if err := r.SetTransportFault(tt.kind); err != nil {
				t.Fatal(err)
			}
			// The stall holds the handshake until this deadline; it is the
			// mechanism under test, not a bound on speed.
			code, err := get(2 * time.Second)
			if err == nil {
				t.Fatalf("got %d and no error; want a failed connection", code)
			}
			tt.check(t, err)
			if err := r.SetTransportFault(""); err != nil {
				t.Fatal(err)
			}
			if ep.Addr() != addr {
				t.Errorf("address changed from %s to %s", addr, ep.Addr())
			}
			if code, err := get(30 * time.Second); err != nil || code != http.StatusOK {
				t.Errorf("after clearing: %d, %v", code, err)
			}
		})
	}
}

func TestEndpointRejects(t *testing.T) {
	secure, err := Start(Options{CertDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = secure.Close() }()
	plain, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Close() }()
	for _, k := range []FaultKind{fakecore.FaultStatus500, "Melt"} {
		if err := secure.SetTransportFault(k); err == nil {
			t.Errorf("SetTransportFault(%s) accepted", k)
		}
	}
	if err := plain.SetTransportFault(fakecore.FaultUntrustedCertificate); err == nil {
		t.Error("SetTransportFault accepted over plain HTTP")
	}
}
