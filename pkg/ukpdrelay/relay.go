package ukpdrelay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Defaults of Config's zero values.
const (
	// DefaultUpstream is where self-hosted ukpd listens.
	DefaultUpstream = "http://127.0.0.1:45232"
	// DefaultTimeout bounds one upstream request, as the server's
	// --kubelet-request-timeout bounds one scrape by default.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxInFlight bounds the upstream requests relayed at once.
	DefaultMaxInFlight = 4
)

// Config says where the relay reads ukpd and whom it admits.
type Config struct {
	// Upstream is ukpd's base URL: http or https to a loopback host
	// (ParseUpstream); empty means DefaultUpstream.
	Upstream string
	// UpstreamCAFile holds the PEM certificates an https upstream's
	// certificate must chain to; empty means the system roots.
	UpstreamCAFile string
	// TokenFile holds ukpd's bearer token, sent to Upstream and nowhere
	// else. It is read again when it changes.
	TokenFile string
	// NodeName is the node whose stats a reader must be allowed to get:
	// the kraftlet node of this host.
	NodeName string
	// Authenticator identifies a request's sender; Authorizer decides
	// whether it may get the node's stats (or its metrics, for /metrics).
	// The relay asks for no conditional decision, so any
	// authorizer.Authorizer serves through its unconditional part.
	Authenticator authenticator.Request
	Authorizer    authorizer.UnconditionalAuthorizer
	// MaxResponseBytes caps an upstream body; 0 means the ukpd client's
	// own cap, ukpd.DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// Timeout bounds one upstream request; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the upstream requests relayed at once, each of
	// which may buffer up to MaxResponseBytes; more are answered 429. 0
	// means DefaultMaxInFlight.
	MaxInFlight int
}

// Relay is the http.Handler of the relay. It is safe for concurrent use.
type Relay struct {
	upstream *upstream
	node     string
	authn    authenticator.Request
	authz    authorizer.UnconditionalAuthorizer
	health   http.Handler
	metrics  http.Handler
	inFlight chan struct{}
}

var _ http.Handler = &Relay{}

// New checks cfg and returns its relay. It reads no file: a token file
// that is missing or empty fails each request until it is there.
func New(cfg Config) (*Relay, error) {
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		return nil, fmt.Errorf("ukpd relay: an authenticator and an authorizer are required")
	}
	if errs := validation.IsDNS1123Subdomain(cfg.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("ukpd relay: node name %q: %s", cfg.NodeName, strings.Join(errs, "; "))
	}
	if cfg.TokenFile == "" {
		return nil, fmt.Errorf("ukpd relay: a token file is required")
	}
	up, err := newUpstream(cfg)
	if err != nil {
		return nil, err
	}
	inFlight := cfg.MaxInFlight
	if inFlight <= 0 {
		inFlight = DefaultMaxInFlight
	}
	health := http.NewServeMux()
	healthz.InstallHandler(health)
	registerMetrics()
	return &Relay{
		upstream: up,
		node:     cfg.NodeName,
		authn:    cfg.Authenticator,
		authz:    cfg.Authorizer,
		health:   health,
		metrics:  legacyregistry.Handler(),
		inFlight: make(chan struct{}, inFlight),
	}, nil
}

// The paths served. Only the two upstream paths are relayed; /metrics is
// the relay's own.
const (
	instancesPath   = "/v1/instances"
	metricsPath     = "/v1/instances/metrics"
	selfMetricsPath = "/metrics"
	healthzPath     = "/healthz"
)

// ServeHTTP serves /healthz to anyone, and every other path to an
// authenticated sender only: the two ukpd read paths to one allowed to get
// the node's stats, /metrics to one allowed to get its metrics.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == healthzPath || strings.HasPrefix(req.URL.Path, healthzPath+"/") {
		r.health.ServeHTTP(w, req)
		return
	}
	code := r.serve(w, req)
	requests.WithLabelValues(pathLabel(req.URL.Path), strconv.Itoa(code)).Inc()
}

// serve answers req and returns the status it answered with.
func (r *Relay) serve(w http.ResponseWriter, req *http.Request) int {
	resp, ok, err := r.authn.AuthenticateRequest(req)
	if err != nil || !ok {
		if err != nil {
			klog.V(2).InfoS("Request not authenticated", "path", req.URL.Path, "remote", req.RemoteAddr, "err", err)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="ukpd-relay"`)
		return writeError(w, http.StatusUnauthorized, "Unauthorized: the relay admits bearer tokens the cluster's TokenReview accepts")
	}
	var (
		subresource string
		query       url.Values
	)
	switch req.URL.Path {
	case instancesPath, metricsPath:
		subresource = "stats"
	case selfMetricsPath:
		subresource = "metrics"
	default:
		return writeError(w, http.StatusNotFound, fmt.Sprintf("Not found: the relay serves GET %s and GET %s", instancesPath, metricsPath))
	}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		return writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method not allowed: %s takes GET only", req.URL.Path))
	}
	if req.URL.Path != selfMetricsPath {
		if query, err = checkQuery(req.URL.Path, req.URL.RawQuery); err != nil {
			return writeError(w, http.StatusBadRequest, "Bad request: "+err.Error())
		}
	}
	if code, denied := r.authorize(w, req, resp.User, subresource); denied {
		return code
	}
	if req.URL.Path == selfMetricsPath {
		r.metrics.ServeHTTP(w, req)
		return http.StatusOK
	}
	select {
	case r.inFlight <- struct{}{}:
		defer func() { <-r.inFlight }()
	default:
		w.Header().Set("Retry-After", "1")
		return writeError(w, http.StatusTooManyRequests, fmt.Sprintf("Too many requests: %d are being relayed", cap(r.inFlight)))
	}
	return r.upstream.relay(w, req, req.URL.Path, query)
}

// authorize asks whether u may get the node's subresource, as the
// kubelet asks for its /stats and /metrics paths
// (pkg/kubelet/server/auth.go, GetRequestAttributes). When not, it answers
// and denied is true.
func (r *Relay) authorize(w http.ResponseWriter, req *http.Request, u user.Info, subresource string) (code int, denied bool) {
	attrs := authorizer.AttributesRecord{
		User:            u,
		Verb:            "get",
		APIVersion:      "v1",
		Resource:        "nodes",
		Subresource:     subresource,
		Name:            r.node,
		ResourceRequest: true,
		Path:            req.URL.Path,
	}
	decision, reason, err := r.authz.Authorize(req.Context(), attrs)
	switch {
	case err != nil:
		klog.ErrorS(err, "Authorization failed", "user", u.GetName(), "subresource", subresource, "node", r.node)
		return writeError(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error: cannot check whether %s may get nodes/%s %s", u.GetName(), subresource, r.node)), true
	case decision != authorizer.DecisionAllow:
		klog.V(2).InfoS("Request forbidden", "user", u.GetName(), "subresource", subresource, "node", r.node, "reason", reason)
		return writeError(w, http.StatusForbidden, fmt.Sprintf("Forbidden: %s may not get nodes/%s %s", u.GetName(), subresource, r.node)), true
	}
	return 0, false
}

// errorBody is the envelope of ukpd's own errors, so that the server's ukpd
// client quotes the message in the error it logs (its statusDetail).
type errorBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// writeError answers code with message and returns code.
func writeError(w http.ResponseWriter, code int, message string) int {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Status: "error", Message: message})
	return code
}

// pathLabel is the "path" label of a request: one of the paths served, or
// "other".
func pathLabel(p string) string {
	switch p {
	case instancesPath, metricsPath, selfMetricsPath:
		return p
	}
	return "other"
}
