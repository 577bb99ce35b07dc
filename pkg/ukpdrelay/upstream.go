package ukpdrelay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
)

// Bounds of the instance list's query. The server asks for pages of 100
// (pkg/sources/ukpd/client.go, listPageSize), from an instance's UUID.
const (
	// MaxCount is the largest count relayed.
	MaxCount = 1000
	// maxFromLen bounds from: a UUID has 36 characters.
	maxFromLen = 64
)

// ParseUpstream checks ukpd's base URL as the server's ukpd client does
// (ukpd.ParseBaseURL), and that its host is loopback: the relay sends
// ukpd's token there, and the token must not leave the host.
func ParseUpstream(s string) (*url.URL, error) {
	u, err := ukpd.ParseBaseURL(s)
	if err != nil {
		return nil, err
	}
	if !ukpd.IsLoopback(u.Hostname()) {
		return nil, fmt.Errorf("ukpd endpoint %s: the host must be loopback (127.0.0.1, ::1 or localhost): the relay sends ukpd's token to it, and the token must not leave the host", u)
	}
	return u, nil
}

// upstream reads ukpd with its token.
type upstream struct {
	base     *url.URL
	client   *http.Client
	token    *ukpd.TokenFile
	maxBytes int64
	timeout  time.Duration
}

func newUpstream(cfg Config) (*upstream, error) {
	raw := cfg.Upstream
	if raw == "" {
		raw = DefaultUpstream
	}
	base, err := ParseUpstream(raw)
	if err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.UpstreamCAFile != "" {
		pem, err := os.ReadFile(cfg.UpstreamCAFile)
		if err != nil {
			return nil, fmt.Errorf("ukpd endpoint %s: read CA file: %w", base, err)
		}
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ukpd endpoint %s: CA file %q holds no PEM certificate", base, cfg.UpstreamCAFile)
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// The token goes to ukpd itself, never through a proxy the
	// environment names.
	transport.Proxy = nil
	transport.TLSClientConfig = tlsConfig
	transport.MaxIdleConnsPerHost = 2
	// To a loopback address given as an IP, connect from that address:
	// the connection stays on the address ukpd listens on (127.0.0.1 to
	// 127.0.0.1 in the usual setup), and a ukpd serving several relays on
	// one machine, as in the e2e suite, sees which relay asked.
	if ip := net.ParseIP(base.Hostname()); ip != nil && ip.IsLoopback() {
		dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
		transport.DialContext = dialer.DialContext
	}
	u := &upstream{
		base: base,
		// A redirect is not followed: it would take the token wherever
		// its Location names (sources.NoRedirects).
		client:   &http.Client{Transport: transport, CheckRedirect: sources.NoRedirects},
		token:    ukpd.NewTokenFile(cfg.TokenFile),
		maxBytes: cfg.MaxResponseBytes,
		timeout:  cfg.Timeout,
	}
	if u.maxBytes <= 0 {
		u.maxBytes = ukpd.DefaultMaxResponseBytes
	}
	if u.timeout <= 0 {
		u.timeout = DefaultTimeout
	}
	return u, nil
}

// relay sends GET path with query to ukpd, with ukpd's token and the
// sender's Accept and nothing else of the sender's, and copies back the
// status, the Content-Type and the body. It answers 502 when ukpd cannot
// be read, redirects, refuses the token, or answers more than the cap, and
// 504 when ukpd does not answer in time. It returns the status answered.
func (u *upstream) relay(w http.ResponseWriter, req *http.Request, path string, query url.Values) int {
	tok, err := u.token.Token()
	if err != nil {
		klog.ErrorS(err, "Cannot read ukpd's token")
		return writeError(w, http.StatusInternalServerError, "Internal error: the relay cannot read ukpd's token; see the relay's log")
	}
	ctx, cancel := context.WithTimeout(req.Context(), u.timeout)
	defer cancel()
	target := u.base.JoinPath(path)
	target.RawQuery = query.Encode()
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return writeError(w, http.StatusInternalServerError, fmt.Sprintf("Internal error: request to ukpd: %v", err))
	}
	out.Header.Set("Authorization", "Bearer "+tok)
	if accept := req.Header.Values("Accept"); len(accept) > 0 {
		out.Header.Set("Accept", strings.Join(accept, ", "))
	}
	start := time.Now()
	defer func() { upstreamDuration.WithLabelValues(path).Observe(time.Since(start).Seconds()) }()
	resp, err := u.client.Do(out)
	if err != nil {
		klog.ErrorS(err, "ukpd did not answer", "path", path)
		if errors.Is(err, context.DeadlineExceeded) && req.Context().Err() == nil {
			return writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("Gateway timeout: ukpd at %s did not answer GET %s within %s", u.base, path, u.timeout))
		}
		return writeError(w, http.StatusBadGateway, fmt.Sprintf("Bad gateway: ukpd at %s did not answer GET %s (%s); see the relay's log", u.base, path, sources.TransportReason(err)))
	}
	defer func() {
		_ = resp.Body.Close()
	}()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		klog.InfoS("ukpd answered a redirect, which is not followed", "path", path, "status", resp.Status)
		return writeError(w, http.StatusBadGateway, fmt.Sprintf("Bad gateway: ukpd answered GET %s with %s, a redirect, which the relay does not follow", path, resp.Status))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// Relayed as is, it would read as the relay refusing the reader.
		klog.InfoS("ukpd refused the relay's token", "path", path, "status", resp.Status)
		return writeError(w, http.StatusBadGateway, fmt.Sprintf("Bad gateway: ukpd refused the relay's token (%s): check the relay's --ukpd-token-file", resp.Status))
	}
	err = sources.ReadCappedTo(resp.Body, u.maxBytes, func(body []byte) error {
		h := w.Header()
		// Absent upstream, the key is set to nil so that net/http does
		// not sniff a type: the server's client reads a body without one
		// by its first byte.
		h["Content-Type"] = slices.Clone(resp.Header["Content-Type"])
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
		return nil
	})
	switch {
	case err == nil:
		return resp.StatusCode
	case sources.Reason(err) == sources.ReasonTooLarge:
		klog.InfoS("ukpd's answer is larger than the cap", "path", path, "maxBytes", u.maxBytes)
		return writeError(w, http.StatusBadGateway, fmt.Sprintf("Bad gateway: ukpd's answer to GET %s is larger than %d bytes, the relay's cap", path, u.maxBytes))
	default:
		klog.ErrorS(err, "Reading ukpd's answer failed", "path", path)
		return writeError(w, http.StatusBadGateway, fmt.Sprintf("Bad gateway: reading ukpd's answer to GET %s failed (%s); see the relay's log", path, sources.Reason(err)))
	}
}

// checkQuery returns the query to relay for path: none for the metrics,
// and at most count (1 to MaxCount) and from (an instance's UUID) for the
// list, each once. Anything else is an error.
func checkQuery(path, raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("malformed query: %w", err)
	}
	if path == metricsPath {
		if len(q) > 0 {
			return nil, fmt.Errorf("%s takes no query", path)
		}
		return nil, nil
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		switch {
		case k != "count" && k != "from":
			return nil, fmt.Errorf("unknown query parameter %q: %s takes count and from", clip(k), path)
		case len(q[k]) != 1:
			return nil, fmt.Errorf("%s given %d times", k, len(q[k]))
		}
	}
	out := url.Values{}
	if c, ok := q["count"]; ok {
		n, err := strconv.Atoi(c[0])
		if err != nil || n < 1 || n > MaxCount {
			return nil, fmt.Errorf("count must be an integer from 1 to %d, got %q", MaxCount, clip(c[0]))
		}
		out.Set("count", strconv.Itoa(n))
	}
	if f, ok := q["from"]; ok {
		if !isInstanceID(f[0]) {
			return nil, fmt.Errorf("from must be an instance's UUID: 1 to %d letters, digits and dashes, got %q", maxFromLen, clip(f[0]))
		}
		out.Set("from", f[0])
	}
	return out, nil
}

func isInstanceID(s string) bool {
	if s == "" || len(s) > maxFromLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// clip shortens what a sender sent to quote it in an answer.
func clip(s string) string { return sources.Clip(s, 64) }
