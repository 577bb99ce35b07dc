package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// newCommand is the fake's program: serve as its options say.
func newCommand() *fakecore.Command {
	opts := NewOptions()
	return fakecore.NewCommand("fake-ukpd", opts, func(ctx context.Context) error {
		return run(ctx, opts.Config(), nil)
	})
}

// run serves until ctx ends. ready, if not nil, receives the state once
// serving.
func run(ctx context.Context, cfg *Options, ready chan<- fakeukpd.State) (err error) {
	srv := fakeukpd.New(fakeukpd.Config{TokenFile: cfg.TokenFile, PageSize: cfg.PageSize})

	apiLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	state := fakeukpd.State{URL: "http://" + apiLn.Addr().String()}
	var caPEM []byte
	if cfg.TLSCertDir != "" {
		tlsLn, pem, err := serveTLS(apiLn, cfg.TLSCertDir)
		if err != nil {
			_ = apiLn.Close()
			return err
		}
		apiLn, caPEM = tlsLn, pem
		state.URL = "https://" + apiLn.Addr().String()
		state.CAFile = filepath.Join(cfg.TLSCertDir, "ca.crt")
	}
	api := fakecore.Serve(apiLn, srv)
	defer func() {
		srv.Close() // release requests held by a slow fault
		err = errors.Join(err, api.Stop())
	}()

	ctl, ctlAddress, err := fakecore.Listen(cfg.ControlAddress, fakeukpd.NewControlHandler(srv, caPEM))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ctl.Stop()) }()
	state.ControlAddress = ctlAddress

	if cfg.StateFile != "" {
		if err := fakecore.WriteState(cfg.StateFile, state); err != nil {
			return err
		}
	}
	klog.InfoS("Fake ukpd ready", "url", state.URL, "controlAddress", state.ControlAddress)
	if ready != nil {
		ready <- state
	}
	select {
	case <-ctx.Done():
		return nil
	case <-api.Done():
		return fmt.Errorf("platform API stopped: %w", api.Err())
	case <-ctl.Done():
		return fmt.Errorf("control API stopped: %w", ctl.Err())
	}
}

// serveTLS generates a CA and a serving certificate for the listener's
// address, localhost and 127.0.0.1, writes the CA to dir/ca.crt and wraps
// the listener.
func serveTLS(ln net.Listener, dir string) (net.Listener, []byte, error) {
	now := time.Now()
	ca, err := fakeukpd.NewCA(now)
	if err != nil {
		return nil, nil, err
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		hosts = append(hosts, host)
	}
	cert, err := ca.TLSCertificate(now, fakeukpd.ServingLeaf(hosts...))
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create TLS cert dir: %w", err)
	}
	if err := fakecore.WriteAtomic(filepath.Join(dir, "ca.crt"), ca.CertPEM(), 0o644); err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return tls.NewListener(ln, cfg), ca.CertPEM(), nil
}
