package app

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app/options"
)

// CertControllerCommand is the first argument that runs the certificate
// controller instead of the server.
const CertControllerCommand = "cert-controller"

// runCertController parses the controller's flags and runs it until ctx is
// done.
func runCertController(ctx context.Context, args []string) error {
	o := options.NewCertControllerOptions()
	return subcommand{
		Name:     CertControllerCommand,
		About:    "keeps the serving certificate of group-metrics-server and the caBundle of its APIServices.",
		Flags:    o.Flags(),
		Validate: o.Validate,
		Logs:     o.Logs,
		Run: func(ctx context.Context) error {
			klog.InfoS("Starting the certificate controller", "version", Version, "apiservices", o.APIServices)
			return o.Run(ctx)
		},
	}.run(ctx, args)
}
