// Command fake-ukpd runs a fake ukpd (the Unikraft platform daemon) on a
// local address, with a plain-HTTP control API on loopback.
package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

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
	u, err := fakeukpd.Start(cfg.Options)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, u.Close()) }()
	if cfg.StateFile != "" {
		if err := fakecore.WriteState(cfg.StateFile, u.State); err != nil {
			return err
		}
	}
	klog.InfoS("Fake ready", "fake", "fake ukpd", "url", u.URL, "controlAddress", u.ControlAddress)
	if ready != nil {
		ready <- u.State
	}
	<-ctx.Done()
	return nil
}
