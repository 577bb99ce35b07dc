// Command fake-ukpd runs a fake ukpd (the Unikraft platform daemon) on a
// local address, with a plain-HTTP control API on loopback.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func main() { fakecore.Main(newCommand()) }

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

// Options are the command-line options of fake-ukpd.
type Options struct {
	fakeukpd.Options
	StateFile string
}

// NewOptions returns the default options.
func NewOptions() *Options {
	return &Options{Options: fakeukpd.Options{Listen: "127.0.0.1:0", ControlAddress: "127.0.0.1:0"}}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Listen, "listen", o.Listen, "Loopback host:port of the platform API; port 0 picks a free one.")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "File of accepted bearer tokens, one a line; read again when it changes.")
	fs.StringVar(&o.CertDir, "tls-cert-dir", o.CertDir, "Serve TLS with a generated CA and write its certificate to <dir>/ca.crt; plain HTTP when empty.")
	fs.StringVar(&o.ControlAddress, "control-address", o.ControlAddress, "Loopback host:port of the plain-HTTP control API.")
	fs.IntVar(&o.PageSize, "page-size", o.PageSize, "Most instances one answer of GET /v1/instances holds, whatever its count asks; 0 means no limit.")
	fs.StringVar((*string)(&o.JSONForm), "json-form", string(o.JSONForm), "Shape of the JSON metrics entries: page (default), schema (the OpenAPI schema's fields) or sdk (the Go SDK's: no uuid nor name).")
	fs.BoolVar(&o.CumulativeCPU, "cumulative-cpu", o.CumulativeCPU, "Keep each instance's CPU time over its starts, as the platform's 2024 API has it, instead of starting it over.")
	fs.StringVar(&o.StateFile, "state-file", o.StateFile, "Write the API URL, control address and CA file here as JSON once serving (default <tls-cert-dir>/ukpd.json with TLS).")
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	loopback := []error{fakecore.CheckLoopback("listen", o.Listen), fakecore.CheckLoopback("control-address", o.ControlAddress)}
	for _, err := range loopback {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := o.Check(); err != nil {
		errs = append(errs, fmt.Errorf("--json-form: %w", err))
	}
	if o.PageSize < 0 {
		errs = append(errs, fmt.Errorf("--page-size must not be negative, got %d", o.PageSize))
	}
	if o.TokenFile == "" {
		errs = append(errs, errors.New("--token-file is required"))
	} else if b, err := os.ReadFile(o.TokenFile); err != nil {
		errs = append(errs, fmt.Errorf("--token-file: %w", err))
	} else if len(fakecore.ParseTokens(string(b))) == 0 {
		errs = append(errs, fmt.Errorf("--token-file %s holds no token", o.TokenFile))
	}
	return errs
}

// Config returns the run configuration: a copy with the state file's
// default.
func (o *Options) Config() *Options {
	c := *o
	if c.StateFile == "" && c.CertDir != "" {
		c.StateFile = filepath.Join(c.CertDir, "ukpd.json")
	}
	return &c
}
