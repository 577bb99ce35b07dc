package fakekubelet

import (
	"compress/gzip"
	"encoding/json"
	"errors"
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

// contentTypes are the Content-Types of the paths' answers.
var contentTypes = map[string]string{summaryPath: "application/json", resourceMetricsPath: ResourceMetricsContentType}

// ServeHTTP serves the kubelet endpoints of this node.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Close waits for the requests that entered before it started.
	f := n.fleet
	f.lifeMu.Lock()
	closed := f.ctx.Err() != nil
	if !closed {
		f.handlers.Add(1)
	}
	f.lifeMu.Unlock()
	if closed {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer f.handlers.Done()
	if !f.authenticated(r) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	if _, ok := contentTypes[path]; !ok {
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
	var out io.Writer = w
	var zw *gzip.Writer
	w.Header().Set("Content-Type", contentTypes[path])
	if path == resourceMetricsPath && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw = gzip.NewWriter(w)
		out = zw
	}
	err := n.render(out, r, path)
	if zw != nil {
		err = errors.Join(err, zw.Close())
	}
	if err != nil {
		klog.V(4).InfoS("Writing response failed", "node", n.name, "path", path, "err", err)
	}
}

// render writes path as the node serves it now, data faults included.
func (n *Node) render(w io.Writer, r *http.Request, path string) error {
	if path == summaryPath {
		only, _ := strconv.ParseBool(r.URL.Query().Get("only_cpu_and_memory"))
		return json.NewEncoder(w).Encode(n.Summary(only))
	}
	return WriteResourceMetrics(w, n.Summary(true))
}

// authenticated accepts a verified client certificate or a known bearer
// token.
func (f *Fleet) authenticated(r *http.Request) bool {
	if _, ok, _ := f.clientCerts.AuthenticateRequest(r); ok {
		return true
	}
	token := fakecore.BearerToken(r)
	ok := fakecore.KnownToken(token, f.cfg.Tokens...)
	if !ok && token != "" && f.cfg.TokenAuthenticator != nil {
		var err error
		if _, ok, err = f.cfg.TokenAuthenticator.AuthenticateToken(r.Context(), token); err != nil {
			klog.V(2).InfoS("Token review failed", "err", err)
			ok = false
		}
	}
	if ok {
		f.recordPresented(token)
	}
	return ok
}
