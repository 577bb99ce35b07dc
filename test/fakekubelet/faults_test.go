package fakekubelet

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

// result is what a client observed for one request.
type result struct {
	err    error
	status int
	body   []byte
	size   int64
}

func do(ctx context.Context, c *http.Client, url string, keepBody bool) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	r := result{status: resp.StatusCode}
	if keepBody {
		r.body, r.err = io.ReadAll(resp.Body)
		r.size = int64(len(r.body))
	} else {
		r.size, r.err = io.Copy(io.Discard, resp.Body)
	}
	return r
}

func http1Client(t *testing.T, f *Fleet) *http.Client {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: certPool(f), MinVersion: tls.VersionTLS12},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name  string
		fault Fault
		path  string
		http1 bool
		check func(t *testing.T, r result)
	}{
		{name: "Status500", fault: Fault{Kind: fakecore.FaultStatus500}, path: summaryPath, check: func(t *testing.T, r result) {
			if r.err != nil || r.status != http.StatusInternalServerError {
				t.Errorf("got status %d, err %v; want 500", r.status, r.err)
			}
		}},
		{name: "Garbage summary", fault: Fault{Kind: fakecore.FaultGarbage}, path: summaryPath, check: func(t *testing.T, r result) {
			var s stats.Summary
			if r.err != nil || r.status != http.StatusOK {
				t.Fatalf("got status %d, err %v; want 200", r.status, r.err)
			}
			if err := json.Unmarshal(r.body, &s); err == nil {
				t.Errorf("garbage decoded as a summary: %q", r.body)
			}
		}},
		{name: "Garbage metrics", fault: Fault{Kind: fakecore.FaultGarbage}, path: resourceMetricsPath, check: func(t *testing.T, r result) {
			if r.err != nil || r.status != http.StatusOK || !bytes.Contains(r.body, []byte{0}) || bytes.Contains(r.body, []byte("resource_scrape_error")) {
				t.Errorf("got status %d, err %v, body %q; want 200 with garbage", r.status, r.err, r.body)
			}
		}},
		{name: "HugeBody", fault: fakecore.HugeBody(16 << 20), path: summaryPath, check: func(t *testing.T, r result) {
			if r.err != nil || r.status != http.StatusOK || r.size != 16<<20 {
				t.Errorf("got status %d, err %v, %d bytes; want 200 with %d bytes", r.status, r.err, r.size, 16<<20)
			}
		}},
		{name: "ResetConnection over HTTP/2", fault: Fault{Kind: fakecore.FaultResetConnection}, path: summaryPath, check: func(t *testing.T, r result) {
			if r.err == nil {
				t.Errorf("got status %d and no error; want a failed request", r.status)
			}
		}},
		{name: "ResetConnection over HTTP/1.1", fault: Fault{Kind: fakecore.FaultResetConnection}, path: resourceMetricsPath, http1: true, check: func(t *testing.T, r result) {
			if !errors.Is(r.err, syscall.ECONNRESET) {
				t.Errorf("got status %d, err %v; want connection reset", r.status, r.err)
			}
		}},
		{name: "Dead", fault: Fault{Kind: FaultDead}, path: summaryPath, check: func(t *testing.T, r result) {
			if !errors.Is(r.err, syscall.ECONNREFUSED) {
				t.Errorf("got status %d, err %v; want connection refused", r.status, r.err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newTestFleet(t, Config{})
			n := addNode(t, f, "node-a")
			setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "p"})
			c := newClient(t, f)
			if tt.http1 {
				c = http1Client(t, f)
			}
			port := n.Port()
			if err := n.SetFault(tt.fault); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			tt.check(t, do(ctx, c, n.URL()+tt.path, tt.fault.Kind != fakecore.FaultHugeBody))

			if err := n.ClearFault(tt.fault.Kind); err != nil {
				t.Fatalf("ClearFault: %v", err)
			}
			if diff := cmp.Diff([]Fault(nil), n.Faults()); diff != "" {
				t.Errorf("faults after clear (-want +got):\n%s", diff)
			}
			if n.Port() != port {
				t.Errorf("port changed from %d to %d", port, n.Port())
			}
			var s stats.Summary
			if err := json.Unmarshal(mustGet(t, newClient(t, f), n, summaryPath), &s); err != nil {
				t.Errorf("summary after clearing: %v", err)
			}
		})
	}
}

func TestFaultNeedsAuthentication(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	if err := n.SetFault(Fault{Kind: fakecore.FaultStatus500}); err != nil {
		t.Fatal(err)
	}
	code, _, err := get(t, newClient(t, f), n, summaryPath, "")
	if err != nil || code != http.StatusUnauthorized {
		t.Errorf("got %d, %v; want 401", code, err)
	}
}

func TestSlowFault(t *testing.T) {
	sc := &signalClock{FakeClock: testingclock.NewFakeClock(t0), timers: make(chan time.Duration, 4)}
	f, _ := newTestFleet(t, Config{Clock: sc})
	n := addNode(t, f, "node-a")
	if err := n.SetFault(fakecore.Slow(time.Minute)); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, f)
	guard := time.NewTimer(requestTimeout)
	defer guard.Stop()

	// The response waits for the clock.
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- do(ctx, c, n.URL()+summaryPath, true) }()
	select {
	case d := <-sc.timers:
		if d != time.Minute {
			t.Errorf("waited %v, want 1m", d)
		}
	case <-guard.C:
		t.Fatal("the handler never started waiting")
	}
	sc.Step(time.Minute)
	if r := <-done; r.err != nil || r.status != http.StatusOK {
		t.Errorf("after the delay: status %d, err %v; want 200", r.status, r.err)
	}

	// A cancelled request ends the wait.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- do(ctx2, c, n.URL()+summaryPath, true) }()
	select {
	case <-sc.timers:
	case <-guard.C:
		t.Fatal("the handler never started waiting")
	}
	cancel2()
	if r := <-done; !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled slow request: status %d, err %v; want context.Canceled", r.status, r.err)
	}
}

func TestStallFault(t *testing.T) {
	for _, tt := range []struct {
		name  string
		http1 bool
		end   string
	}{
		{name: "cancel over HTTP/2", end: "cancel"},
		{name: "cancel over HTTP/1.1", http1: true, end: "cancel"},
		{name: "fleet close", end: "close"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newTestFleet(t, Config{})
			n := addNode(t, f, "node-a")
			if err := n.SetFault(Fault{Kind: fakecore.FaultStall}); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, f)
			if tt.http1 {
				c = http1Client(t, f)
			}
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+summaryPath, nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("headers: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			prefix := make([]byte, 8)
			if _, err := io.ReadFull(resp.Body, prefix); err != nil {
				t.Fatalf("reading the flushed prefix: %v", err)
			}
			read := make(chan error, 1)
			go func(body io.Reader) {
				_, err := io.Copy(io.Discard, body)
				read <- err
			}(resp.Body)
			switch tt.end {
			case "cancel":
				cancel()
			case "close":
				if err := f.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			if err := <-read; err == nil {
				t.Error("stalled body ended cleanly; want an error")
			}
		})
	}
}

func TestNodeCounterResetFault(t *testing.T) {
	f, fc := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "a"})
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "b"})
	fc.Step(30 * time.Second)
	if err := n.SetFault(Fault{Kind: fakecore.FaultCounterReset}); err != nil {
		t.Fatal(err)
	}
	fc.Step(time.Second)
	var s stats.Summary
	if err := json.Unmarshal(mustGet(t, newClient(t, f), n, summaryPath+"?only_cpu_and_memory=true"), &s); err != nil {
		t.Fatal(err)
	}
	type podView struct {
		Start   time.Time
		Counter uint64
	}
	var got []podView
	for _, p := range s.Pods {
		got = append(got, podView{p.Containers[0].StartTime.UTC(), *p.Containers[0].CPU.UsageCoreNanoSeconds})
	}
	want := []podView{{t0.Add(30 * time.Second), DefaultContainerCPU}, {t0.Add(30 * time.Second), DefaultContainerCPU}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Fault(nil), n.Faults()); diff != "" {
		t.Errorf("CounterReset was kept as a fault (-want +got):\n%s", diff)
	}
}

func TestSetFaultRejectsBadInput(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	for _, fault := range []Fault{{Kind: "Melt"}, {Kind: fakecore.FaultSlow}, fakecore.Slow(-time.Second), {Kind: fakecore.FaultGarbage, Path: "/stats/summary"}} {
		if err := n.SetFault(fault); err == nil {
			t.Errorf("SetFault(%+v) succeeded", fault)
		}
	}
	if err := n.ClearFault("Melt"); err == nil {
		t.Error("ClearFault of an unknown kind succeeded")
	}
}
