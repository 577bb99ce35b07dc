package app

import (
	"context"
	"fmt"
	"io"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
)

// subcommand is a command of the binary other than the server, named by the
// first argument: what it is for (About, for --help), its flags, their
// checks, its logging options and what it runs.
type subcommand struct {
	Name, About string
	Flags       cliflag.NamedFlagSets
	Validate    func() []error
	Logs        *logsapi.LoggingConfiguration
	// Run runs it until ctx is done, once the flags are parsed and
	// checked and logging is set up.
	Run func(context.Context) error
}

// run parses args into the command's flags (printing usage for --help),
// checks them, applies the logging options, and runs the command.
func (c subcommand) run(ctx context.Context, args []string) error {
	usage := func(w io.Writer, fss cliflag.NamedFlagSets) {
		fmt.Fprintf(w, "group-metrics-server %s %s\n\nUsage:\n  group-metrics-server %s [flags]\n", c.Name, c.About, c.Name)
		cliflag.PrintSections(w, fss, 0)
	}
	if help, err := parse(c.Name, c.Flags, args, usage); help || err != nil {
		return err
	}
	if errs := c.Validate(); len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	if err := logsapi.ValidateAndApply(c.Logs, nil); err != nil {
		return err
	}
	defer klog.Flush()
	return c.Run(ctx)
}
