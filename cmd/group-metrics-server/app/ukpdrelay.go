package app

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app/options"
)

// UkpdRelayCommand is the first argument that runs the ukpd relay instead
// of the server.
const UkpdRelayCommand = "ukpd-relay"

// runUkpdRelay parses the relay's flags and runs it until ctx is done.
func runUkpdRelay(ctx context.Context, args []string) error {
	o := options.NewUkpdRelayOptions()
	return subcommand{
		Name:     UkpdRelayCommand,
		About:    "serves a host's loopback ukpd to group-metrics-server over TLS, to identities allowed to get the host's kraftlet node's stats.",
		Flags:    o.Flags(),
		Validate: o.Validate,
		Logs:     o.Logs,
		Run: func(ctx context.Context) error {
			klog.InfoS("Starting the ukpd relay", "version", Version, "node", o.NodeName, "ukpd", o.UkpdURL)
			return o.Run(ctx)
		},
	}.run(ctx, args)
}
