// Command fake-kubelet-fleet runs a fleet of fake kubelets on 127.0.0.1,
// one TLS endpoint per node, with a plain-HTTP control API on loopback.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().Execute(ctx, os.Args[1:]); err != nil {
		klog.ErrorS(err, "fake-kubelet-fleet failed")
		klog.Flush()
		os.Exit(1)
	}
}
