// Command demo runs group-metrics-server on a local control plane until it is
// interrupted: three kwok nodes backed by a fake kubelet fleet, a kraftlet
// node whose unikernel pods a fake ukpd reports, the server deployed from
// manifests/base with the kubelet and ukpd sources, and a sample Deployment
// with an HPA on each kind of node. With
// --down it stops a demo left running and removes its directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", "", "Work directory of the demo; default <repo>/.demo.")
	flag.IntVar(&o.nodes, "nodes", 3, "Number of fake nodes.")
	flag.BoolVar(&o.down, "down", false, "Stop a running demo and remove its directory.")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	if o.down {
		err = down(o)
	} else {
		err = up(ctx, o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}
