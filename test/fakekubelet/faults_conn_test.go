package fakekubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

func TestConnectionFaults(t *testing.T) {
	tests := []struct {
		kind  FaultKind
		check func(t *testing.T, err error)
	}{
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
			f, _ := newTestFleet(t, Config{})
			n := addNode(t, f, "node-a")
			c := newClient(t, f)
			port := n.Port()
			// A connection made before the fault must not outlive it.
			mustGet(t, c, n, summaryPath)
			if err := n.SetFault(Fault{Kind: tt.kind}); err != nil {
				t.Fatal(err)
			}
			// The stall holds the handshake until this deadline; it is the
			// mechanism under test, not a bound on speed.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r := do(ctx, c, n.URL()+summaryPath, true)
			if r.err == nil {
				t.Fatalf("got status %d and no error; want a failed connection", r.status)
			}
			tt.check(t, r.err)

			if err := n.ClearFault(tt.kind); err != nil {
				t.Fatal(err)
			}
			if n.Port() != port {
				t.Errorf("port changed from %d to %d", port, n.Port())
			}
			mustGet(t, c, n, summaryPath)
		})
	}
}

// TestHandshakeStallSendsNothing checks that a stalled connection is
// accepted but never answered, and is closed when the fault is cleared.
func TestHandshakeStallSendsNothing(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	if err := n.SetFault(Fault{Kind: fakecore.FaultHandshakeStall}); err != nil {
		t.Fatal(err)
	}
	d := tls.Dialer{Config: &tls.Config{RootCAs: certPool(f), MinVersion: tls.VersionTLS12}}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		conn, err := d.DialContext(ctx, "tcp", n.Address())
		if err == nil {
			_ = conn.Close()
		}
		done <- err
	}()
	for n.ep.Held() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the dial ended before the connection was held: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Clearing the fault closes held connections: the handshake fails
	// rather than waiting for the guard deadline.
	if err := n.ClearFault(""); err != nil {
		t.Fatal(err)
	}
	err := <-done
	switch {
	case err == nil:
		t.Error("the handshake completed on a stalled connection")
	case errors.Is(err, context.DeadlineExceeded):
		t.Errorf("the held connection was not closed when the fault was cleared: %v", err)
	}
	c := newClient(t, f)
	mustGet(t, c, n, summaryPath)
}

func TestConnectionFaultWhileDead(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	for _, fault := range []Fault{{Kind: FaultDead}, {Kind: fakecore.FaultUntrustedCertificate}} {
		if err := n.SetFault(fault); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if r := do(ctx, newClient(t, f), n.URL()+summaryPath, true); r.err == nil {
		t.Fatal("a Dead node answered")
	}
	// Back from the dead, still with the untrusted certificate.
	if err := n.ClearFault(FaultDead); err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if r := do(ctx, newClient(t, f), n.URL()+summaryPath, true); !errors.As(r.err, &unknown) {
		t.Errorf("got status %d, err %v; want an unknown authority", r.status, r.err)
	}
	if err := n.ClearFault(""); err != nil {
		t.Fatal(err)
	}
	if r := do(ctx, newClient(t, f), n.URL()+summaryPath, true); r.err != nil || r.status != http.StatusOK {
		t.Errorf("after clearing: status %d, err %v", r.status, r.err)
	}
}
