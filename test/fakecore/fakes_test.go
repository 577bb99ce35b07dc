package fakecore_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// t0 is a whole second, so samples fall on whole seconds from it.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

const (
	token           = "test-token"
	contentTypeJSON = "application/json"
	// requestTimeout bounds every request a test makes; it is a guard
	// against hangs, never an assertion about speed.
	requestTimeout = 30 * time.Second
)

// request is one answer a fake renders: a path, the Accept header it is
// asked with, the Content-Type of its answer and a marker every complete
// answer holds and no fault's does.
type request struct{ path, accept, contentType, marker string }

// fake is a fake serving over TLS on the table's clock, with two pods or
// instances, as the fault table sees it: which answers it renders (the
// first JSON; errorAnswer has Status500's Content-Type and a marker), and
// what its data say: view, a line a pod or instance; wantClock, the view
// elapsed after t0 with the clock back; wantAfterReset, the view a second
// after a CounterReset at 30s.
type fake struct {
	url            string
	caPEM          []byte
	requests       []request
	errorAnswer    request
	set            func(fakecore.Fault) error
	clear          func(fakecore.FaultKind) error
	faults         func() []fakecore.Fault
	held           func() int // connections a HandshakeStall holds
	stop           func()     // ends the answers faults hold back
	foreign        fakecore.Fault
	unsupported    []fakecore.FaultKind
	view           func(t *testing.T, get func(request) []byte) []string
	wantClock      func(elapsed, back time.Duration) []string
	wantAfterReset []string
}

var fakes = []struct {
	name  string
	start func(t *testing.T, clk clock.Clock) *fake
}{{"kubelet", startKubelet}, {"ukpd", startUKPD}}

func startKubelet(t *testing.T, clk clock.Clock) *fake {
	f, err := fakekubelet.NewFleet(fakekubelet.Config{Clock: clk, Tokens: []string{token}})
	must(t, err)
	t.Cleanup(func() { must(t, f.Close()) })
	n, err := f.AddNode("node-a", 0)
	must(t, err)
	for _, pod := range []string{"a", "b"} {
		must(t, f.SetPod("node-a", fakekubelet.Pod{Namespace: "ns", Name: pod}))
	}
	// Refused is a node's Dead.
	dead := func(k fakecore.FaultKind) fakecore.FaultKind {
		if k == fakecore.FaultRefused {
			return fakekubelet.FaultDead
		}
		return k
	}
	summary := request{"/stats/summary?only_cpu_and_memory=true", "", contentTypeJSON, `"podRef"`}
	line := func(pod string, at, started time.Time, cpu, mem uint64) string {
		return fmt.Sprintf("%s at %s started %s cpu %d mem %d", pod, at.UTC().Format(time.RFC3339),
			started.UTC().Format(time.RFC3339), cpu, mem)
	}
	// both are both pods sampled at t0+at, started at t0+started.
	both := func(at, started time.Duration, cpu uint64) []string {
		var out []string
		for _, pod := range []string{"ns/a", "ns/b"} {
			out = append(out, line(pod, t0.Add(at), t0.Add(started), cpu, fakekubelet.DefaultContainerMemory))
		}
		return out
	}
	return &fake{
		url:         "https://" + n.Address(),
		caPEM:       f.CACertPEM(),
		requests:    []request{summary, {"/metrics/resource", "", fakekubelet.ResourceMetricsContentType, "resource_scrape_error"}},
		errorAnswer: request{contentType: "text/plain; charset=utf-8", marker: "Internal Error"},
		set:         func(fl fakecore.Fault) error { fl.Kind = dead(fl.Kind); return n.SetFault(fl) },
		clear:       func(k fakecore.FaultKind) error { return n.ClearFault(dead(k)) },
		faults:      n.Faults,
		held:        n.HeldConnections,
		stop:        func() { _ = f.Close() },
		foreign:     fakecore.Fault{Kind: fakecore.FaultGarbage, Path: "/stats/summary"},
		view: func(t *testing.T, get func(request) []byte) []string {
			var s stats.Summary
			must(t, json.Unmarshal(get(summary), &s))
			var out []string
			for _, p := range s.Pods {
				c := p.Containers[0]
				out = append(out, line(p.PodRef.Namespace+"/"+p.PodRef.Name, c.CPU.Time.Time, c.StartTime.Time,
					*c.CPU.UsageCoreNanoSeconds, *c.Memory.WorkingSetBytes))
			}
			return out
		},
		// Samples carry times back by the offset, counters read then.
		wantClock: func(elapsed, back time.Duration) []string {
			at := elapsed - back.Truncate(time.Second)
			return both(at, 0, uint64(at.Seconds())*fakekubelet.DefaultContainerCPU)
		},
		// Every container starts again, its counter from zero.
		wantAfterReset: both(31*time.Second, 30*time.Second, fakekubelet.DefaultContainerCPU),
	}
}

func startUKPD(t *testing.T, clk clock.Clock) *fake {
	r, err := fakeukpd.Start(fakeukpd.Options{Config: fakeukpd.Config{Clock: clk, Tokens: []string{token}}, CertDir: t.TempDir()})
	must(t, err)
	t.Cleanup(func() { must(t, r.Close()) })
	for _, spec := range []fakeukpd.InstanceSpec{
		{UUID: "running", Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1, RSSBytes: 1 << 20},
		{UUID: "standby", Namespace: "ns", Pod: "q", Container: "c", CPUCores: 1, State: fakeukpd.StateStandby},
	} {
		_, err := r.AddInstance(spec)
		must(t, err)
	}
	caPEM, err := os.ReadFile(r.CAFile)
	must(t, err)
	// The transport faults belong to its endpoint.
	transport := func(k fakecore.FaultKind) bool {
		return slices.Contains([]fakecore.FaultKind{fakecore.FaultRefused, fakecore.FaultUntrustedCertificate,
			fakecore.FaultWrongNameCertificate, fakecore.FaultHandshakeStall}, k)
	}
	list := request{"/v1/instances", "", contentTypeJSON, `"op_time_us"`}
	metrics := request{"/v1/instances/metrics", contentTypeJSON, contentTypeJSON, `"cpu_time_ms"`}
	const textType = "text/plain; version=0.0.4; charset=utf-8"
	text := request{"/v1/instances/metrics", "text/plain", textType, "instance_rss_bytes"}
	type entry struct {
		UUID       string `json:"uuid"`
		CreatedAt  string `json:"created_at"`
		StartedAt  string `json:"started_at"`
		StartCount uint64 `json:"start_count"`
		UptimeMS   int64  `json:"uptime_ms"`
		CPUTimeMS  int64  `json:"cpu_time_ms"`
		RSSBytes   uint64 `json:"rss_bytes"`
	}
	line := func(from string, e entry) string {
		return fmt.Sprintf("%s %s created %q started %q starts %d uptime %dms cpu %dms rss %d",
			from, e.UUID, e.CreatedAt, e.StartedAt, e.StartCount, e.UptimeMS, e.CPUTimeMS, e.RSSBytes)
	}
	// lines is the view of the running instance, as listed and in the
	// metrics, then of the one in standby, each from their start at.
	lines := func(at string, starts uint64, uptime, cpu int64) []string {
		return []string{
			line("", entry{UUID: "running", CreatedAt: at, StartedAt: at, StartCount: starts, UptimeMS: uptime}),
			line("", entry{UUID: "standby", CreatedAt: at, StartedAt: at, StartCount: 1}),
			line("/metrics", entry{UUID: "running", StartedAt: at, StartCount: starts, UptimeMS: uptime, CPUTimeMS: cpu,
				RSSBytes: 1 << 20}),
			line("/metrics", entry{UUID: "standby", StartedAt: at, StartCount: 1}),
		}
	}
	return &fake{
		url:         r.URL,
		caPEM:       caPEM,
		requests:    []request{list, metrics, text},
		errorAnswer: request{contentType: contentTypeJSON, marker: `"status":"error"`},
		set: func(f fakecore.Fault) error {
			if transport(f.Kind) {
				return r.SetTransportFault(f.Kind)
			}
			return r.SetFault(f)
		},
		clear: func(k fakecore.FaultKind) error {
			if transport(k) {
				return r.SetTransportFault("")
			}
			r.ClearFault(k)
			return nil
		},
		faults:      r.Faults,
		held:        r.HeldConnections,
		stop:        r.Server.Close,
		foreign:     fakecore.Fault{Kind: fakecore.FaultGarbage, Pod: "ns/p"},
		unsupported: []fakecore.FaultKind{fakecore.FaultResetConnection},
		view: func(t *testing.T, get func(request) []byte) []string {
			var out []string
			for _, r := range []request{list, metrics} {
				var env struct{ Data struct{ Instances []entry } }
				must(t, json.Unmarshal(get(r), &env))
				for _, e := range env.Data.Instances {
					out = append(out, line(strings.TrimPrefix(r.path, "/v1/instances"), e))
				}
			}
			return out
		},
		// Every started_at and created_at moves back by whole seconds; CPU
		// time and uptime do not follow the clock.
		wantClock: func(elapsed, back time.Duration) []string {
			ms := elapsed.Milliseconds()
			return lines(t0.Add(-back.Truncate(time.Second)).Format(time.RFC3339), 1, ms, ms)
		},
		// A running instance counts a start and its CPU time restarts;
		// started_at stays, and so does an instance in standby.
		wantAfterReset: lines(t0.Format(time.RFC3339), 2, 31000, 1000),
	}
}

// harness is a fake started for one case, on its own clock, with clients
// that trust it.
type harness struct {
	*fake
	clk       *signalClock
	pool      *x509.CertPool
	h2, http1 *http.Client
}

func newHarness(t *testing.T, start func(*testing.T, clock.Clock) *fake) *harness {
	clk := &signalClock{FakeClock: testingclock.NewFakeClock(t0), timers: make(chan time.Duration, 8)}
	h := &harness{fake: start(t, clk), clk: clk, pool: x509.NewCertPool()}
	h.pool.AppendCertsFromPEM(h.caPEM)
	client := func(http1 bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: !http1}
		if http1 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	h.h2, h.http1 = client(false), client(true)
	return h
}

// signalClock is a fake clock that reports every timer it creates, so a
// test can step the clock exactly when the fake waits on it.
type signalClock struct {
	*testingclock.FakeClock
	timers chan time.Duration
}

func (c *signalClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers <- d
	return t
}

// waitTimer waits until the fake waits for a timer, which must be of d.
func (h *harness) waitTimer(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-h.clk.timers:
		if got != d {
			t.Errorf("waited %v, want %v", got, d)
		}
	case <-time.After(requestTimeout):
		t.Fatal("the fake never started waiting")
	}
}

// result is what a client observed for one request.
type result struct {
	err    error
	status int
	ct     string
	body   []byte
}

func (r result) String() string {
	return fmt.Sprintf("status %d %q, error %v, %d bytes %.80q", r.status, r.ct, r.err, len(r.body), r.body)
}

// request makes r, with tok if not empty.
func (h *harness) request(ctx context.Context, r request, tok string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+r.path, nil)
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req
}

func (h *harness) do(ctx context.Context, c *http.Client, r request, tok string) result {
	resp, err := c.Do(h.request(ctx, r, tok))
	if err != nil {
		return result{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	res := result{status: resp.StatusCode, ct: resp.Header.Get("Content-Type")}
	res.body, res.err = io.ReadAll(resp.Body)
	return res
}

// get sends r over HTTP/2 within requestTimeout.
func (h *harness) get(r request, tok string) result {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return h.do(ctx, h.h2, r, tok)
}

// async sends the first request in the background.
func (h *harness) async(ctx context.Context) <-chan result {
	done := make(chan result, 1)
	go func() { done <- h.do(ctx, h.h2, h.requests[0], token) }()
	return done
}

// mustGet returns the body of r, which must be a complete answer.
func (h *harness) mustGet(t *testing.T, r request) []byte {
	t.Helper()
	res := h.get(r, token)
	if res.err != nil || res.status != http.StatusOK || res.ct != r.contentType || !has(res.body, r.marker) {
		t.Fatalf("GET %s: %s; want 200 %q with %q", r.path, res, r.contentType, r.marker)
	}
	return res.body
}

func (h *harness) checkView(t *testing.T, when string, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, h.view(t, func(r request) []byte { return h.mustGet(t, r) })); diff != "" {
		t.Errorf("%s (-want +got):\n%s", when, diff)
	}
}

func has(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
