package fakecore_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// faultCase is a fault every fake serves alike. Each case sets its fault;
// then the fault is cleared and the fake must serve every answer again, on
// the same address, to the same client, unless the case stopped it. For a
// response fault, answer says whether res is its answer to r; for a
// transport fault, failed says whether a request sent within deadline
// (requestTimeout when 0) failed as it should; run checks the others.
type faultCase struct {
	name     string
	fault    fakecore.Fault
	answer   func(h *harness, r request, res result) bool
	failed   func(err error) bool
	deadline time.Duration
	run      func(t *testing.T, h *harness)
	stops    bool // run stopped the fake
}

var faultCases = []faultCase{
	{name: "Status500", fault: fakecore.Fault{Kind: fakecore.FaultStatus500}, answer: func(h *harness, r request, res result) bool {
		// Authentication comes first.
		return res.status == http.StatusInternalServerError && res.ct == h.errorAnswer.contentType &&
			has(res.body, h.errorAnswer.marker) && h.get(r, "").status == http.StatusUnauthorized
	}},
	{name: "Garbage", fault: fakecore.Fault{Kind: fakecore.FaultGarbage}, answer: func(_ *harness, r request, res result) bool {
		return res.status == http.StatusOK && res.ct == r.contentType && has(res.body, "\x00\xff") && !has(res.body, r.marker) &&
			(r.contentType != contentTypeJSON || !json.Valid(res.body))
	}},
	{name: "HugeBody", fault: fakecore.HugeBody(1 << 20), answer: func(_ *harness, _ request, res result) bool {
		return res.status == http.StatusOK && len(res.body) == 1<<20
	}},
	{name: "Truncated", fault: fakecore.Fault{Kind: fakecore.FaultTruncated}, run: func(t *testing.T, h *harness) {
		h.clk.Step(10 * time.Second)
		var full [][]byte
		for _, r := range h.requests {
			full = append(full, h.mustGet(t, r))
		}
		must(t, h.set(fakecore.Fault{Kind: fakecore.FaultTruncated}))
		for i, r := range h.requests {
			res := h.get(r, token)
			if res.err != nil || res.status != http.StatusOK || res.ct != r.contentType || len(res.body) != len(full[i])/2 ||
				!bytes.HasPrefix(full[i], res.body) || r.contentType == contentTypeJSON && json.Valid(res.body) {
				t.Errorf("GET %s: %s; want 200 %q and the first half, not valid, of %q", r.path, res, r.contentType, full[i])
			}
		}
		must(t, h.clear(fakecore.FaultTruncated))
		for i, r := range h.requests {
			if got := h.mustGet(t, r); !bytes.Equal(got, full[i]) {
				t.Errorf("GET %s after clearing: %q, want %q", r.path, got, full[i])
			}
		}
	}},
	{name: "Stall", fault: fakecore.Fault{Kind: fakecore.FaultStall}, run: func(t *testing.T, h *harness) {
		must(t, h.set(fakecore.Fault{Kind: fakecore.FaultStall}))
		for _, c := range []*http.Client{h.h2, h.http1} {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			read := h.stalled(t, ctx, c)
			cancel()
			if err := <-read; err == nil {
				t.Error("a stalled body ended cleanly when the request was cancelled")
			}
		}
	}},
	{name: "Slow", fault: fakecore.Slow(time.Minute), run: func(t *testing.T, h *harness) {
		must(t, h.set(fakecore.Slow(time.Minute)))
		done := h.async(context.Background())
		h.waitTimer(t, time.Minute)
		h.clk.Step(time.Minute)
		if res := <-done; res.err != nil || res.status != http.StatusOK {
			t.Errorf("after the delay: %s; want 200", res)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done = h.async(ctx)
		h.waitTimer(t, time.Minute)
		cancel()
		if res := <-done; !errors.Is(res.err, context.Canceled) {
			t.Errorf("cancelled slow request: %s; want context.Canceled", res)
		}
	}},
	{name: "Stall and Slow, then stopped", stops: true, run: func(t *testing.T, h *harness) {
		must(t, h.set(fakecore.Fault{Kind: fakecore.FaultStall}))
		stalled := h.stalled(t, context.Background(), h.h2)
		must(t, h.set(fakecore.Slow(time.Minute)))
		slow := h.async(context.Background())
		h.waitTimer(t, time.Minute)
		h.stop()
		if err := <-stalled; err == nil {
			t.Error("a stalled body ended cleanly when the fake stopped")
		}
		if res := <-slow; res.err == nil {
			t.Errorf("slow request completed after stop: %s; want it abandoned", res)
		}
	}},
	{name: "ResetConnection", fault: fakecore.Fault{Kind: fakecore.FaultResetConnection}, run: func(t *testing.T, h *harness) {
		must(t, h.set(fakecore.Fault{Kind: fakecore.FaultResetConnection}))
		for _, r := range h.requests {
			if res := h.do(context.Background(), h.h2, r, token); res.err == nil {
				t.Errorf("GET %s over HTTP/2: %s; want a failed request", r.path, res)
			}
			if res := h.do(context.Background(), h.http1, r, token); !errors.Is(res.err, syscall.ECONNRESET) {
				t.Errorf("GET %s over HTTP/1.1: %s; want a connection reset", r.path, res)
			}
		}
	}},
	{name: "Refused", fault: fakecore.Fault{Kind: fakecore.FaultRefused}, failed: func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
	{name: "UntrustedCertificate", fault: fakecore.Fault{Kind: fakecore.FaultUntrustedCertificate}, failed: func(err error) bool { return errors.As(err, &x509.UnknownAuthorityError{}) }},
	{name: "WrongNameCertificate", fault: fakecore.Fault{Kind: fakecore.FaultWrongNameCertificate}, failed: func(err error) bool { return errors.As(err, &x509.HostnameError{}) }},
	// The stall holds the handshake until the deadline: the mechanism
	// under test, not a bound on speed.
	{name: "HandshakeStall", fault: fakecore.Fault{Kind: fakecore.FaultHandshakeStall}, deadline: 50 * time.Millisecond, failed: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	{name: "HandshakeStall holds until cleared", fault: fakecore.Fault{Kind: fakecore.FaultHandshakeStall}, run: func(t *testing.T, h *harness) {
		must(t, h.set(fakecore.Fault{Kind: fakecore.FaultHandshakeStall}))
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			d := tls.Dialer{Config: &tls.Config{RootCAs: h.pool, MinVersion: tls.VersionTLS12}}
			conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(h.url, "https://"))
			if err == nil {
				_ = conn.Close()
			}
			done <- err
		}()
		must(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, requestTimeout, true, func(context.Context) (bool, error) {
			select {
			case err := <-done:
				return false, fmt.Errorf("the dial ended before the connection was held: %w", err)
			default:
				return h.held() > 0, nil
			}
		}))
		// Clearing the fault closes held connections: the handshake fails
		// rather than waiting for the guard deadline.
		must(t, h.clear(fakecore.FaultHandshakeStall))
		if err := <-done; err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the held handshake ended with %v; want it closed when the fault was cleared", err)
		}
	}},
	{name: "ClockBackwards", fault: fakecore.Fault{Kind: fakecore.FaultClockBackwards}, run: func(t *testing.T, h *harness) {
		back := 20*time.Second + 400*time.Millisecond
		h.clk.Step(time.Minute)
		h.checkView(t, "before the fault", h.wantClock(time.Minute, 0))
		must(t, h.set(fakecore.ClockBackwards(back)))
		h.checkView(t, "clock 20.4s back", h.wantClock(time.Minute, back))
		h.clk.Step(5 * time.Second)
		h.checkView(t, "5s later", h.wantClock(65*time.Second, back))
		must(t, h.clear(fakecore.FaultClockBackwards))
		h.checkView(t, "after clearing", h.wantClock(65*time.Second, 0))
	}},
	{name: "CounterReset, not kept", fault: fakecore.Fault{Kind: fakecore.FaultCounterReset}, run: func(t *testing.T, h *harness) {
		h.clk.Step(30 * time.Second)
		must(t, h.set(fakecore.Fault{Kind: fakecore.FaultCounterReset}))
		if f := h.faults(); len(f) != 0 {
			t.Errorf("CounterReset was kept as a fault: %v", f)
		}
		h.clk.Step(time.Second)
		h.checkView(t, "reset at 30s, read at 31s", h.wantAfterReset)
	}},
	{name: "bad input", run: func(t *testing.T, h *harness) {
		for _, f := range []fakecore.Fault{
			{Kind: "Melt"}, {Kind: fakecore.FaultSlow}, fakecore.Slow(-time.Second),
			{Kind: fakecore.FaultClockBackwards}, fakecore.ClockBackwards(time.Millisecond), h.foreign,
		} {
			if err := h.set(f); err == nil {
				t.Errorf("set %+v accepted", f)
			}
		}
	}},
}

func TestFaults(t *testing.T) {
	for _, fk := range fakes {
		for _, tc := range faultCases {
			t.Run(fk.name+"/"+tc.name, func(t *testing.T) {
				h := newHarness(t, fk.start)
				switch {
				case slices.Contains(h.unsupported, tc.fault.Kind):
					if err := h.set(tc.fault); err == nil {
						t.Errorf("%s accepted; the fake does not serve it", tc.fault.Kind)
					}
					return
				case tc.answer != nil:
					must(t, h.set(tc.fault))
					for _, r := range h.requests {
						if res := h.get(r, token); res.err != nil || !tc.answer(h, r, res) {
							t.Errorf("GET %s under %s: %s", r.path, tc.fault.Kind, res)
						}
					}
				case tc.failed != nil:
					h.mustGet(t, h.requests[0]) // a connection the fault must not let live
					must(t, h.set(tc.fault))
					ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.deadline, requestTimeout))
					defer cancel()
					if res := h.do(ctx, h.h2, h.requests[0], token); res.err == nil || !tc.failed(res.err) {
						t.Errorf("under %s: %s", tc.fault.Kind, res)
					}
				default:
					tc.run(t, h)
				}
				if tc.stops {
					return
				}
				must(t, h.clear(tc.fault.Kind))
				if f := h.faults(); len(f) != 0 {
					t.Errorf("faults after clearing: %v", f)
				}
				for _, r := range h.requests {
					h.mustGet(t, r)
				}
			})
		}
	}
}

// stalled sends the first request with c, checks that it gets 200 and the
// start of a body, and reads the rest in the background: the channel takes
// how that read ends.
func (h *harness) stalled(t *testing.T, ctx context.Context, c *http.Client) <-chan error {
	t.Helper()
	resp, err := c.Do(h.request(ctx, h.requests[0], token))
	if err != nil {
		t.Fatalf("headers: %v", err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if _, err := io.ReadFull(resp.Body, make([]byte, 8)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, reading the flushed prefix: %v", resp.StatusCode, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		read <- err
	}()
	return read
}
