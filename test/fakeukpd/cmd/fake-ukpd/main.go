// Command fake-ukpd runs a fake ukpd (the Unikraft platform daemon) on a
// local address, with a plain-HTTP control API on loopback.
package main

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/cert"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func main() { fakecore.Main(newCommand()) }

// newCommand is the fake's program: serve as its options say.
func newCommand() *cobra.Command {
	opts := NewOptions()
	return fakecore.NewCommand("fake-ukpd", opts, func(ctx context.Context) error {
		return run(ctx, opts.Config(), nil)
	})
}

// run serves until ctx ends. ready, if not nil, receives the state once
// serving.
func run(ctx context.Context, cfg *Options, ready chan<- fakeukpd.State) (err error) {
	srv := fakeukpd.New(fakeukpd.Config{TokenFile: cfg.TokenFile, PageSize: cfg.PageSize})
	defer srv.Close() // release requests held by a slow fault
	var (
		state fakeukpd.State
		caPEM []byte
	)
	if cfg.TLSCertDir == "" {
		api, addr, err := fakecore.Listen(cfg.Listen, srv)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, api.Stop()) }()
		state.URL = "http://" + addr
	} else {
		ca, err := fakeukpd.NewCA(time.Now())
		if err != nil {
			return err
		}
		host, _, _ := net.SplitHostPort(cfg.Listen)
		api, err := fakecore.NewEndpoint(fakecore.EndpointConfig{
			Addr: cfg.Listen, Handler: srv, CA: ca, Leaf: fakeukpd.ServingLeaf("127.0.0.1", "::1", "localhost", host),
		})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, api.Close()) }()
		caPEM, state.URL, state.CAFile = ca.CertPEM(), "https://"+api.Addr(), filepath.Join(cfg.TLSCertDir, "ca.crt")
		if err := cert.WriteCert(state.CAFile, caPEM); err != nil {
			return err
		}
	}
	return fakecore.ServeControl(ctx, "fake ukpd", cfg.ControlAddress, fakeukpd.NewControlHandler(srv, caPEM), func(addr string) error {
		state.ControlAddress = addr
		if cfg.StateFile != "" {
			if err := fakecore.WriteState(cfg.StateFile, state); err != nil {
				return err
			}
		}
		if ready != nil {
			ready <- state
		}
		return nil
	})
}
