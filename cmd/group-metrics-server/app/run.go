// Package app is the group-metrics-server command: parse flags, validate
// them all, build the server and run it.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app/options"
)

// Version is set at link time.
var Version = "dev"

// Run parses args and runs the server until ctx is done; with
// CertControllerCommand first, the certificate controller instead, and with
// UkpdRelayCommand first, the ukpd relay.
func Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == CertControllerCommand {
		return runCertController(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == UkpdRelayCommand {
		return runUkpdRelay(ctx, args[1:])
	}
	o, done, err := prepare(args)
	if done || err != nil {
		return err
	}
	defer klog.Flush()

	cfg, err := o.ServerConfig(ctx)
	if err != nil {
		return err
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return err
	}
	klog.InfoS("Starting group-metrics-server", "version", Version, "resolution", o.MetricResolution)
	return srv.Run(ctx)
}

// prepare parses and validates args, and applies what takes effect at
// once (feature gates, logging, self-metrics options). done says that
// nothing is left to run: --help or --version was asked for.
func prepare(args []string) (o *options.Options, done bool, err error) {
	o = options.NewOptions()
	fss := o.Flags()
	if help, err := parse("group-metrics-server", fss, args, usage); help || err != nil {
		return nil, true, err
	}
	if o.ShowVersion {
		// As metrics-server: the version alone on stdout, exit status 0.
		fmt.Println(Version)
		return nil, true, nil
	}
	if err := o.SetGlobals(); err != nil {
		return nil, true, err
	}
	if errs := o.Validate(); len(errs) > 0 {
		return nil, true, utilerrors.NewAggregate(errs)
	}
	ignored, err := o.Complete()
	if err != nil {
		return nil, true, err
	}
	for _, w := range ignored {
		klog.InfoS("Warning: flag accepted for compatibility with metrics-server and ignored", "detail", w)
	}
	return o, false, nil
}

// parse parses args into the named flag sets, in their order; help says
// that --help was asked for (and printed with usage).
func parse(name string, fss cliflag.NamedFlagSets, args []string, usage func(io.Writer, cliflag.NamedFlagSets)) (help bool, err error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, n := range fss.Order {
		fs.AddFlagSet(fss.FlagSets[n])
	}
	fs.Usage = func() { usage(os.Stderr, fss) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return false, nil
}

func usage(w io.Writer, fss cliflag.NamedFlagSets) {
	fmt.Fprintf(w, "group-metrics-server serves metrics.k8s.io from kubelets and other sources.\n\nUsage:\n  group-metrics-server [flags]\n  group-metrics-server %s [flags]   (the serving certificate's controller: %s --help)\n  group-metrics-server %s [flags]        (a host's ukpd, relayed over TLS: %s --help)\n", CertControllerCommand, CertControllerCommand, UkpdRelayCommand, UkpdRelayCommand)
	cliflag.PrintSections(w, fss, 0)
}
