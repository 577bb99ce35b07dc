// Command benchcompare measures group-metrics-server side by side with
// metrics-server v0.8.0 on a real local control plane: a kwok cluster of
// nodes whose kubelets are one fake kubelet fleet, with the two servers run
// in turn (A B A B ...), each round a fresh process with the same flags. It
// prints a table of medians and every round's raw values. `make
// bench-compare` runs it; see docs/benchmarks.md.
//
// It parses nothing by hand: each server's /metrics is read with
// prometheus/common's expfmt (through test/promtext), and the processes'
// CPU and memory and the machine's description with prometheus/procfs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
)

func main() {
	o := NewOptions()
	fs := pflag.NewFlagSet("benchcompare", pflag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "benchcompare: %v\n", err)
		os.Exit(1)
	}
}
