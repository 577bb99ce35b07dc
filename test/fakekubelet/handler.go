package fakekubelet

import (
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
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
	gz := path == resourceMetricsPath && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	b := n.render(r, path, gz)
	w.Header().Set("Content-Type", b.contentType)
	if gz {
		w.Header().Set("Content-Encoding", "gzip")
	}
	if _, err := w.Write(b.body); err != nil {
		klog.V(4).InfoS("Writing response failed", "node", n.name, "path", path, "err", err)
	}
}

// rendered is a response body and its content type.
type rendered struct {
	body        []byte
	contentType string
}

// render renders path as the node serves it now, data faults included,
// gzip-compressed if asked.
func (n *Node) render(r *http.Request, path string, gz bool) rendered {
	if path == summaryPath {
		only, _ := strconv.ParseBool(r.URL.Query().Get("only_cpu_and_memory"))
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(n.Summary(only)); err != nil {
			klog.V(4).InfoS("Encoding summary failed", "node", n.name, "err", err)
		}
		return rendered{body: buf.Bytes(), contentType: "application/json"}
	}
	var buf bytes.Buffer
	var out io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		out = zw
	}
	if err := WriteResourceMetrics(out, n.Summary(true)); err != nil {
		klog.V(4).InfoS("Writing resource metrics failed", "node", n.name, "err", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			klog.V(4).InfoS("Closing gzip stream failed", "node", n.name, "err", err)
		}
	}
	return rendered{body: buf.Bytes(), contentType: ResourceMetricsContentType}
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
	token := fakecore.BearerToken(r)
	if token == "" {
		return false
	}
	if fakecore.KnownToken(token, f.cfg.Tokens...) {
		f.recordPresented(token)
		return true
	}
	if f.cfg.TokenAuthenticator != nil {
		_, ok, err := f.cfg.TokenAuthenticator.AuthenticateToken(r.Context(), token)
		if err != nil {
			klog.V(2).InfoS("Token review failed", "err", err)
		}
		if ok && err == nil {
			f.recordPresented(token)
		}
		return ok && err == nil
	}
	return false
}
