// Command demo runs group-metrics-server on a local control plane until it is
// interrupted: three kwok nodes backed by a fake kubelet fleet, a kraftlet
// node whose unikernel pods a fake ukpd reports, the server deployed from
// manifests/base with the kubelet and ukpd sources, and a sample Deployment
// with an HPA on each kind of node. Where the machine can (as root, with
// make tools-node), a real node too: a kubelet and containerd running a
// Deployment and the LeaderWorkerSet project's sample. With --down it stops
// a demo left running, cleans up a real node a demo that died left, and
// removes its directory.
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
	flag.BoolVar(&o.realNode, "real-node", true, "Also start a real node (a kubelet and containerd; needs root and 'make tools-node') when the machine can run one.")
	flag.BoolVar(&o.down, "down", false, "Stop a running demo, clean up a real node a demo that died left, and remove its directory.")
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
