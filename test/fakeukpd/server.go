// Package fakeukpd is a fake of ukpd, the Unikraft platform daemon, for
// tests: it serves GET /v1/instances and GET /v1/instances/metrics in the
// documented wire formats; the test drives its instances and faults
// (README.md). Server is an http.Handler; Start adds TLS, transport faults
// and the control API.
package fakeukpd

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// Config configures a Server.
type Config struct {
	// Clock drives counters, timestamps and Slow; nil means the real clock.
	Clock clock.Clock
	// Tokens are accepted bearer tokens, and so are those of TokenFile,
	// read again on every request.
	Tokens    []string
	TokenFile string
	// PageSize is the most instances one answer of GET /v1/instances
	// holds, whatever its count asks (a server whose default page is
	// smaller than the account); 0 means no limit.
	PageSize int
	// IgnoreFrom answers every list request from the first instance,
	// whatever its from asks: a server that takes count but not from, the
	// case the client's pagination guard is for (no such server was
	// observed; this stands for the failure, not for a known release).
	IgnoreFrom bool
	JSONForm   JSONForm // empty means JSONFormPage
	// CumulativeCPU keeps an instance's CPU time over its starts (restarts
	// and wakes), as the platform's 2024 API has it: "Cumulative metrics
	// (e.g., used CPU time) are accumulated over instance starts"
	// (unikraft-cloud/openapi platform.yaml at 3ad3989, /instances/metrics).
	// Without it the counter starts over at each start, as today's
	// documentation says.
	CumulativeCPU bool
}

// JSONForm is a shape of the JSON metrics entries.
type JSONForm string

const (
	// JSONFormPage has every field the platform's documentation page shows.
	JSONFormPage JSONForm = "page"
	// JSONFormSchema has only the fields of the OpenAPI schema of a metrics
	// entry (unikraft-cloud/openapi platform.yaml at 3ad3989,
	// components.schemas.instance_metrics): uuid and name, but no state,
	// start_count, started_at nor uptime_ms.
	JSONFormSchema JSONForm = "schema"
	// JSONFormSDK has only the fields of the Go SDK's metrics entry
	// (unikraft-cloud/go-sdk at 7f41cc0, platform/
	// model_get_instances_metrics_response_instance_metrics.gen.go): no
	// uuid nor name either, so an entry names no instance.
	JSONFormSDK JSONForm = "sdk"
)

// jsonFields are the fields each form keeps of a page-form entry.
var jsonFields = map[JSONForm][]string{
	JSONFormSchema: {"status", "uuid", "name", "rss_bytes", "cpu_time_ms", "rx_bytes", "rx_packets", "tx_bytes", "tx_packets", "nconns", "nreqs", "nqueued", "ntotal"},
	JSONFormSDK:    {"status", "rss_bytes", "cpu_time_ms", "boot_time_us", "net_time_us", "rx_bytes", "rx_packets", "tx_bytes", "tx_packets", "nconns", "nreqs", "nqueued", "ntotal"},
}

// Check returns an error for a JSONForm the server does not know.
func (c Config) Check() error {
	if _, ok := jsonFields[c.JSONForm]; !ok && c.JSONForm != "" && c.JSONForm != JSONFormPage {
		return fmt.Errorf("unknown JSON form %q (want %s, %s or %s)", c.JSONForm, JSONFormPage, JSONFormSchema, JSONFormSDK)
	}
	return nil
}

// Client is an address that reached the platform API: how often, and how
// often without an accepted bearer token (answered 401).
type Client struct {
	IP           string `json:"ip"`
	Requests     int    `json:"requests"`
	Unauthorized int    `json:"unauthorized"`
}

// Server is a fake ukpd. It is safe for concurrent use.
type Server struct {
	clock     clock.Clock
	tokenFile string

	mu           sync.Mutex
	tokens       []string
	instances    map[string]*instance // by UUID
	seq          int
	faults       map[FaultKind]Fault
	pageSize     int
	ignoreFrom   bool
	listRequests int
	jsonForm     JSONForm
	cumulative   bool
	clients      map[string]*Client // by IP

	closeOnce sync.Once
	closed    chan struct{}
}

var _ http.Handler = &Server{}

// New returns a Server without instances; an unknown JSONForm serves the
// page form (Start refuses it).
func New(cfg Config) *Server {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Server{clock: cfg.Clock, tokenFile: cfg.TokenFile, tokens: slices.Clone(cfg.Tokens), instances: map[string]*instance{},
		faults: map[FaultKind]Fault{}, pageSize: cfg.PageSize, ignoreFrom: cfg.IgnoreFrom, jsonForm: cfg.JSONForm,
		cumulative: cfg.CumulativeCPU, clients: map[string]*Client{}, closed: make(chan struct{})}
}

// Close ends the requests faults hold; the server answers others.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

// ListRequests counts the answers to GET /v1/instances so far.
func (s *Server) ListRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listRequests
}

// Clients returns every address that sent the platform API a request.
func (s *Server) Clients() []Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Client, 0, len(s.clients))
	for _, c := range s.clients {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Client) int { return cmp.Compare(a.IP, b.IP) })
	return out
}

// noteClient counts a request from remoteAddr (host:port).
func (s *Server) noteClient(remoteAddr string, authorized bool) {
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		ip = remoteAddr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[ip] == nil {
		s.clients[ip] = &Client{IP: ip}
	}
	s.clients[ip].Requests++
	if !authorized {
		s.clients[ip].Unauthorized++
	}
}

// SetTokens replaces Config.Tokens.
func (s *Server) SetTokens(tokens ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = slices.Clone(tokens)
}

const (
	listPath    = "/v1/instances"
	metricsPath = "/v1/instances/metrics"

	contentTypeJSON = "application/json"
	contentTypeText = "text/plain; version=0.0.4; charset=utf-8"
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.clock.Now()
	path := strings.TrimSuffix(r.URL.Path, "/")
	_, perInstance := instanceMetricsID(path)
	isMetrics := path != listPath
	asJSON := !isMetrics || wantsJSON(r.Header.Get("Accept"))
	authorized := s.authenticated(r)
	s.noteClient(r.RemoteAddr, authorized)
	switch {
	case !authorized:
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeAPIError(w, http.StatusUnauthorized, "Unauthorized", start, s.clock)
	case path != listPath && path != metricsPath && !perInstance:
		writeAPIError(w, http.StatusNotFound, "Not found: "+path, start, s.clock)
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", http.MethodGet)
		writeAPIError(w, http.StatusMethodNotAllowed, "Method not allowed", start, s.clock)
	case !s.serveFault(w, r, path, isMetrics, asJSON):
		s.serveData(w, r, path, isMetrics, asJSON, start)
	}
}

// serveData answers a read of the list or the metrics.
func (s *Server) serveData(w http.ResponseWriter, r *http.Request, path string, isMetrics, asJSON bool, start time.Time) {
	if !isMetrics {
		s.writeList(w, r, start)
		return
	}
	var ids []string
	if id, perInstance := instanceMetricsID(path); perInstance {
		ids = []string{id}
	} else if q := r.URL.Query().Get("uuid"); q != "" {
		ids = strings.Split(q, ",")
	}
	entries, older, ok := s.metrics(ids)
	switch {
	case !ok:
		writeAPIError(w, http.StatusNotFound, "No instance "+strings.Join(ids, ","), start, s.clock)
	case asJSON && older:
		writeEnvelope(w, olderEntries(entries), start, s.clock)
	case asJSON && jsonFields[s.jsonForm] != nil:
		writeEnvelope(w, formEntries(entries, jsonFields[s.jsonForm]), start, s.clock)
	case asJSON:
		writeEnvelope(w, entries, start, s.clock)
	default:
		w.Header().Set("Content-Type", contentTypeText)
		writeText(w, entries)
	}
}

// instanceMetricsID reads /v1/instances/{id}/metrics.
func instanceMetricsID(path string) (string, bool) {
	id, ok := strings.CutSuffix(strings.TrimPrefix(path, listPath+"/"), "/metrics")
	return id, ok && strings.HasPrefix(path, listPath+"/") && id != "" && !strings.Contains(id, "/")
}

// wantsJSON says whether an Accept header names application/json.
func wantsJSON(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == contentTypeJSON {
			return true
		}
	}
	return false
}

// authenticated accepts a known bearer token. The token file is read on
// every request (it costs about what a check that it changed would), so a
// rotated file counts at once; an unreadable one accepts nothing.
func (s *Server) authenticated(r *http.Request) bool {
	s.mu.Lock()
	known := slices.Clone(s.tokens)
	s.mu.Unlock()
	if s.tokenFile != "" {
		b, err := os.ReadFile(s.tokenFile)
		if err != nil {
			klog.V(2).InfoS("Token file unreadable", "err", err)
		}
		known = append(known, fakecore.ParseTokens(string(b))...)
	}
	return fakecore.KnownToken(fakecore.BearerToken(r), known...)
}

// writeAPIError answers in the API's envelope with status "error".
func writeAPIError(w http.ResponseWriter, code int, msg string, start time.Time, clk clock.PassiveClock) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(code)
	writeJSON(w, map[string]any{"status": "error", "message": msg, "errors": []map[string]any{{"status": code}}, "op_time_us": opTime(start, clk)})
}

func opTime(start time.Time, clk clock.PassiveClock) int64 {
	return max(clk.Since(start).Microseconds(), 1)
}

// formEntries keeps only fields of each entry.
func formEntries(entries []metricsEntry, fields []string) []map[string]json.RawMessage {
	out := make([]map[string]json.RawMessage, 0, len(entries))
	for _, e := range entries {
		var all map[string]json.RawMessage
		b, _ := json.Marshal(e) // cannot fail: strings and numbers
		_ = json.Unmarshal(b, &all)
		maps.DeleteFunc(all, func(k string, _ json.RawMessage) bool { return !slices.Contains(fields, k) })
		out = append(out, all)
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(4).InfoS("Writing JSON failed", "err", err)
	}
}
