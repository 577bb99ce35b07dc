package fakekubelet

import (
	"compress/gzip"
	"crypto/subtle"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

const (
	summaryPath         = "/stats/summary"
	resourceMetricsPath = "/metrics/resource"
)

// ServeHTTP serves the kubelet endpoints of this node.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !n.fleet.enterHandler() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer n.fleet.handlers.Done()
	if !n.fleet.authenticated(r) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	if path != summaryPath && path != resourceMetricsPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if handled := n.serveFault(w, r, path); handled {
		return
	}
	t := n.fleet.tl.now()
	if path == summaryPath {
		only, _ := strconv.ParseBool(r.URL.Query().Get("only_cpu_and_memory"))
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(n.summaryAt(t, only)); err != nil {
			klog.V(4).InfoS("Writing summary failed", "node", n.name, "err", err)
		}
		return
	}
	w.Header().Set("Content-Type", ResourceMetricsContentType)
	var out io.Writer = w
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		defer func() {
			if err := gz.Close(); err != nil {
				klog.V(4).InfoS("Closing gzip stream failed", "node", n.name, "err", err)
			}
		}()
		out = gz
	}
	if err := WriteResourceMetrics(out, n.summaryAt(t, true)); err != nil {
		klog.V(4).InfoS("Writing resource metrics failed", "node", n.name, "err", err)
	}
}

// authenticated accepts a verified client certificate or a known bearer
// token.
func (f *Fleet) authenticated(r *http.Request) bool {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		certs := r.TLS.PeerCertificates
		opts := x509.VerifyOptions{
			Roots:         f.clientCA,
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			CurrentTime:   f.cfg.Clock.Now(),
		}
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := certs[0].Verify(opts); err == nil {
			return true
		}
	}
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return false
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return false
	}
	for known := range f.tokens {
		if subtle.ConstantTimeCompare([]byte(known), []byte(token)) == 1 {
			return true
		}
	}
	if f.cfg.TokenAuthenticator != nil {
		ok, err := f.cfg.TokenAuthenticator.AuthenticateToken(r.Context(), token)
		if err != nil {
			klog.V(2).InfoS("Token review failed", "err", err)
		}
		return ok && err == nil
	}
	return false
}
