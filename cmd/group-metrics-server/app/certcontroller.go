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

// CertControllerCommand is the first argument that runs the certificate
// controller instead of the server.
const CertControllerCommand = "cert-controller"

// runCertController parses the controller's flags and runs it until ctx is
// done.
func runCertController(ctx context.Context, args []string) error {
	o := options.NewCertControllerOptions()
	fss := o.Flags()
	if help, err := parse(CertControllerCommand, fss, args, certControllerUsage); help || err != nil {
		return err
	}
	if errs := o.Validate(); len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
		return err
	}
	defer klog.Flush()
	klog.InfoS("Starting the certificate controller", "version", Version, "apiservices", o.APIServices)
	return o.Run(ctx)
}

func certControllerUsage(w io.Writer, fss cliflag.NamedFlagSets) {
	fmt.Fprintf(w, "group-metrics-server cert-controller keeps the serving certificate of group-metrics-server and the caBundle of its APIServices.\n\nUsage:\n  group-metrics-server cert-controller [flags]\n")
	cliflag.PrintSections(w, fss, 0)
}
