package fakeukpd

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

func TestFaults(t *testing.T) {
	h := newHarness(t, Config{})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c"})
	tests := []struct {
		name        string
		fault       Fault
		path        string
		accept      string
		wantCode    int
		wantCT      string
		wantBody    string
		wantBodyLen int
	}{
		{name: "500", fault: Fault{Kind: fakecore.FaultStatus500}, path: metricsPath, wantCode: 500, wantCT: contentTypeJSON, wantBody: `"status":"error"`},
		{name: "garbage JSON", fault: Fault{Kind: fakecore.FaultGarbage}, path: listPath, wantCode: 200, wantCT: contentTypeJSON, wantBody: "\x00\xff"},
		{name: "garbage text", fault: Fault{Kind: fakecore.FaultGarbage}, path: metricsPath, accept: "text/plain", wantCode: 200, wantCT: contentTypeText, wantBody: "oops"},
		{name: "huge body", fault: Fault{Kind: fakecore.FaultHugeBody, Bytes: 100_000}, path: metricsPath, wantCode: 200, wantBodyLen: 100_000},
		{name: "limited to the list", fault: Fault{Kind: fakecore.FaultStatus500, Path: listPath}, path: metricsPath, accept: "application/json", wantCode: 200, wantCT: contentTypeJSON},
		{name: "on the list", fault: Fault{Kind: fakecore.FaultStatus500, Path: listPath}, path: listPath, wantCode: 500},
		{name: "per-instance metrics count as metrics", fault: Fault{Kind: fakecore.FaultStatus500, Path: metricsPath}, path: "/v1/instances/p-c-1/metrics", wantCode: 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.s.SetFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			defer h.s.ClearFault("")
			code, ct, body := h.get(t, tc.path, tc.accept)
			if code != tc.wantCode || (tc.wantCT != "" && ct != tc.wantCT) {
				t.Fatalf("GET %s = %d %q, want %d %q", tc.path, code, ct, tc.wantCode, tc.wantCT)
			}
			if !strings.Contains(body, tc.wantBody) {
				t.Errorf("body %q lacks %q", body, tc.wantBody)
			}
			if tc.wantBodyLen > 0 && len(body) != tc.wantBodyLen {
				t.Errorf("body is %d bytes, want %d", len(body), tc.wantBodyLen)
			}
		})
	}
}

func TestFaultRejects(t *testing.T) {
	h := newHarness(t, Config{})
	for _, f := range []Fault{{Kind: "Explode"}, {Kind: fakecore.FaultSlow}, {Kind: fakecore.FaultGarbage, Path: "/v1/images"}, {Kind: fakecore.FaultGarbage, Pod: "ns/p"}} {
		if err := h.s.SetFault(f); err == nil {
			t.Errorf("SetFault(%+v) accepted", f)
		}
	}
}

func TestSlowFault(t *testing.T) {
	h := newHarness(t, Config{})
	if err := h.s.SetFault(fakecore.Slow(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// Answered once the fake clock passes the delay.
	done := make(chan int, 1)
	slow := mustRequest(t, h.srv.URL+listPath)
	go func() {
		resp, err := h.srv.Client().Do(slow)
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	for !h.clk.HasWaiters() {
		runtime.Gosched()
	}
	h.clk.Step(30 * time.Second)
	if code := <-done; code != http.StatusOK {
		t.Errorf("slow request = %d, want 200", code)
	}

	// Abandoned when the client gives up.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+listPath, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	errs := make(chan error, 1)
	go func() {
		resp, err := h.srv.Client().Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		errs <- err
	}()
	for !h.clk.HasWaiters() {
		runtime.Gosched()
	}
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled slow request: %v, want context.Canceled", err)
	}

	// Released when the server closes.
	held := mustRequest(t, h.srv.URL+listPath)
	go func() {
		resp, err := h.srv.Client().Do(held)
		if err == nil {
			_ = resp.Body.Close()
		}
		errs <- err
	}()
	for !h.clk.HasWaiters() {
		runtime.Gosched()
	}
	h.s.Close()
	if err := <-errs; err == nil {
		t.Error("slow request completed after Close, want it abandoned")
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

func TestHostileText(t *testing.T) {
	h := newHarness(t, Config{})
	if err := h.s.SetFault(Fault{Kind: FaultHostileText, Bytes: 3 << 20}); err != nil {
		t.Fatal(err)
	}
	code, ct, body := h.get(t, metricsPath, "application/json")
	if code != 200 || ct != contentTypeText || len(body) != 3<<20 {
		t.Fatalf("GET = %d %q, %d bytes; want 200, text, 3 MiB", code, ct, len(body))
	}
	line, _, _ := strings.Cut(body, "\n")
	if n := strings.Count(line, `="v"`); n != 100_000 {
		t.Errorf("first line has %d labels, want 100,000", n)
	}
}
