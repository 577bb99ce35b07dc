package options

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
)

// serveCertMetrics serves the certificate controller's self-metrics on
// addr's /metrics, and its probes on /livez and /readyz (with /healthz the
// same as /livez), plain HTTP, until ctx is done. They hold counts and
// expiry times only: no credential, no certificate, no profiling endpoint,
// so the port needs no authentication (docs/security.md). The listener is
// opened before it returns, so a taken port fails the start; it returns the
// address listened on.
func serveCertMetrics(ctx context.Context, addr string, live, ready []healthz.HealthChecker) (net.Addr, error) {
	certs.RegisterMetrics()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	healthz.InstallHandler(mux, live...)
	healthz.InstallLivezHandler(mux, live...)
	healthz.InstallReadyzHandler(mux, ready...)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Serving the certificate controller's metrics stopped")
		}
	}()
	klog.InfoS("Serving the certificate controller's metrics", "address", ln.Addr().String(), "paths", []string{"/metrics", "/livez", "/readyz", "/healthz"})
	return ln.Addr(), nil
}
