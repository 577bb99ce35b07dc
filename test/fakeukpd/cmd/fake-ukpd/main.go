// Command fake-ukpd runs a fake ukpd (the Unikraft platform daemon) on a
// local address, with a plain-HTTP control API on loopback.
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
		klog.ErrorS(err, "fake-ukpd failed")
		klog.Flush()
		os.Exit(1)
	}
}
