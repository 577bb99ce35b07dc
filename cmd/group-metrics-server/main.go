// Command group-metrics-server is an aggregated API server that serves the
// resource metrics API (metrics.k8s.io) for kubectl top and the HPA.
package main

import (
	"os"

	// Mozilla's roots, for when the system has none (the image holds the
	// binary alone): a ukpd endpoint given without --ukpd-certificate-authority
	// is verified against the system roots.
	_ "golang.org/x/crypto/x509roots/fallback"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	if err := app.Run(ctx, os.Args[1:]); err != nil {
		klog.ErrorS(err, "group-metrics-server failed")
		klog.Flush()
		os.Exit(1)
	}
}
