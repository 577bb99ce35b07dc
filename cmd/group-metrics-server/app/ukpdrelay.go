package app

import (
	"context"
	"fmt"
	"io"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app/options"
)

// UkpdRelayCommand is the first argument that runs the ukpd relay instead
// of the server.
const UkpdRelayCommand = "ukpd-relay"

// runUkpdRelay parses the relay's flags and runs it until ctx is done.
func runUkpdRelay(ctx context.Context, args []string) error {
	o := options.NewUkpdRelayOptions()
	fss := o.Flags()
	if help, err := parse(UkpdRelayCommand, fss, args, ukpdRelayUsage); help || err != nil {
		return err
	}
	if errs := o.Validate(); len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
		return err
	}
	defer klog.Flush()
	klog.InfoS("Starting the ukpd relay", "version", Version, "node", o.NodeName, "ukpd", o.UkpdURL)
	return o.Run(ctx)
}

func ukpdRelayUsage(w io.Writer, fss cliflag.NamedFlagSets) {
	fmt.Fprintf(w, "group-metrics-server ukpd-relay serves a host's loopback ukpd to group-metrics-server over TLS, to identities allowed to get the host's kraftlet node's stats.\n\nUsage:\n  group-metrics-server ukpd-relay [flags]\n")
	cliflag.PrintSections(w, fss, 0)
}
