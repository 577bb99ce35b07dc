package fakeukpd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sampleView is what the data-fault tests read of a metrics entry.
type sampleView struct {
	UUID       string
	StartCount uint64
	StartedAt  string
	CPUTimeMS  int64
	RSSBytes   uint64
}

func metricsView(t *testing.T, h *harness) []sampleView {
	t.Helper()
	_, _, body := h.get(t, metricsPath, "application/json")
	var out []sampleView
	for _, e := range decodeEnvelope[metricsEntry](t, body) {
		out = append(out, sampleView{e.UUID, e.StartCount, e.StartedAt, e.CPUTimeMS, e.RSSBytes})
	}
	return out
}

func TestCounterResetFault(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1, RSSBytes: 1 << 20})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "q", Container: "c", CPUCores: 1, State: StateStandby, UUID: "standby"})
	h.clk.Step(10 * time.Second)
	started := "2026-12-01T10:00:00Z"
	if err := h.s.SetFault(Fault{Kind: fakecore.FaultCounterReset}); err != nil {
		t.Fatal(err)
	}
	h.clk.Step(5 * time.Second)
	want := []sampleView{
		{UUID: in.UUID, StartCount: 2, StartedAt: started, CPUTimeMS: 5000, RSSBytes: 1 << 20},
		{UUID: "standby", StartCount: 1, StartedAt: started},
	}
	if diff := cmp.Diff(want, metricsView(t, h)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if f := h.s.Faults(); len(f) != 0 {
		t.Errorf("CounterReset was kept as a fault: %v", f)
	}
}

func TestClockBackwardsFault(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1})
	h.clk.Step(60 * time.Second)
	if err := h.s.SetFault(fakecore.ClockBackwards(30*time.Second + 400*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// Times go back by whole seconds; CPU time does not follow the clock.
	want := []sampleView{{UUID: in.UUID, StartCount: 1, StartedAt: "2026-12-01T09:59:30Z", CPUTimeMS: 60000}}
	if diff := cmp.Diff(want, metricsView(t, h)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	_, _, body := h.get(t, listPath, "")
	list := decodeEnvelope[listEntry](t, body)
	if len(list) != 1 || list[0].StartedAt != "2026-12-01T09:59:30Z" || list[0].CreatedAt != "2026-12-01T09:59:30Z" || list[0].UptimeMS != 60000 {
		t.Errorf("list: %+v", list)
	}
	h.s.ClearFault(fakecore.FaultClockBackwards)
	want[0].StartedAt = "2026-12-01T10:00:00Z"
	if diff := cmp.Diff(want, metricsView(t, h)); diff != "" {
		t.Errorf("after clearing (-want +got):\n%s", diff)
	}
	for _, f := range []Fault{{Kind: fakecore.FaultClockBackwards}, {Kind: fakecore.FaultClockBackwards, Offset: metav1.Duration{Duration: time.Minute}, Path: listPath}} {
		if err := h.s.SetFault(f); err == nil {
			t.Errorf("SetFault(%+v) accepted", f)
		}
	}
}

func TestDuplicateInstancesFault(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1, RSSBytes: 1 << 20})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "q", Container: "c", State: StateStopped, UUID: "stopped"})
	h.clk.Step(10 * time.Second)
	if err := h.s.SetFault(Fault{Kind: FaultDuplicateInstances}); err != nil {
		t.Fatal(err)
	}
	started := "2026-12-01T10:00:00Z"
	want := []sampleView{
		{UUID: in.UUID, StartCount: 1, StartedAt: started, CPUTimeMS: 10000, RSSBytes: 1 << 20},
		{UUID: duplicateUUID(in.UUID), StartCount: 1, StartedAt: started, CPUTimeMS: 20000, RSSBytes: 2 << 20},
	}
	if diff := cmp.Diff(want, metricsView(t, h)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// The copy is listed with the same tags, so it is attributed to the
	// same pod and container.
	_, _, body := h.get(t, listPath, "")
	list := decodeEnvelope[listEntry](t, body)
	if len(list) != 3 || list[1].UUID != duplicateUUID(in.UUID) || list[1].Name != duplicateName(in.Name) || !cmp.Equal(list[1].Tags, list[0].Tags) {
		t.Errorf("list: %+v", list)
	}
	h.s.ClearFault(FaultDuplicateInstances)
	if got := metricsView(t, h); len(got) != 1 {
		t.Errorf("after clearing: %+v", got)
	}
}

func TestTruncatedFault(t *testing.T) {
	h := newHarness(t, Config{})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1})
	h.clk.Step(10 * time.Second)
	for _, tc := range []struct{ path, accept string }{{listPath, ""}, {metricsPath, "application/json"}, {metricsPath, "text/plain"}} {
		t.Run(tc.path+" "+tc.accept, func(t *testing.T) {
			code, ct, full := h.get(t, tc.path, tc.accept)
			if err := h.s.SetFault(Fault{Kind: fakecore.FaultTruncated}); err != nil {
				t.Fatal(err)
			}
			defer h.s.ClearFault("")
			code2, ct2, cut := h.get(t, tc.path, tc.accept)
			if code2 != code || ct2 != ct || len(cut) != len(full)/2 || !strings.HasPrefix(full, cut) {
				t.Fatalf("got %d %q %q; want %d %q and the first half of %q", code2, ct2, cut, code, ct, full)
			}
			if ct == contentTypeJSON && json.Valid([]byte(cut)) {
				t.Errorf("a truncated body is valid JSON: %q", cut)
			}
		})
	}
}

func TestStallFault(t *testing.T) {
	h := newHarness(t, Config{})
	if err := h.s.SetFault(Fault{Kind: fakecore.FaultStall}); err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"cancel", "close"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+metricsPath, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Accept", "application/json")
			resp, err := h.srv.Client().Do(req)
			if err != nil {
				t.Fatalf("headers: %v", err)
			}
			defer func() { _ = resp.Body.Close() }()
			prefix := make([]byte, 10)
			if _, err := io.ReadFull(resp.Body, prefix); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, reading the prefix: %v", resp.StatusCode, err)
			}
			read := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, resp.Body)
				read <- err
			}()
			if end == "cancel" {
				cancel()
			} else {
				h.s.Close()
			}
			if err := <-read; err == nil {
				t.Error("a stalled body ended cleanly")
			}
		})
	}
}
