package fakecore_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// requestTimeout bounds every request a test makes; it is a guard against
// hangs, never an assertion about speed.
const requestTimeout = 30 * time.Second

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
