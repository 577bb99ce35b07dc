package fakeukpd

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// dataHarness serves one running instance, 10s after it started.
func dataHarness(t *testing.T) (*harness, Instance) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1, RSSBytes: 1 << 20})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "q", Container: "c", State: StateStopped, UUID: "stopped"})
	h.clk.Step(10 * time.Second)
	return h, in
}

func TestDuplicateInstancesFault(t *testing.T) {
	h, in := dataHarness(t)
	must(t, h.s.SetFault(Fault{Kind: FaultDuplicateInstances}))
	type sample struct {
		UUID       string
		StartCount uint64
		StartedAt  string
		CPUTimeMS  int64
		RSSBytes   uint64
	}
	var got []sample
	for _, e := range getMetrics[metricsEntry](t, h) {
		got = append(got, sample{e.UUID, e.StartCount, e.StartedAt, e.CPUTimeMS, e.RSSBytes})
	}
	want := []sample{
		{UUID: in.UUID, StartCount: 1, StartedAt: "2026-12-01T10:00:00Z", CPUTimeMS: 10000, RSSBytes: 1 << 20},
		{UUID: duplicateUUID(in.UUID), StartCount: 1, StartedAt: "2026-12-01T10:00:00Z", CPUTimeMS: 20000, RSSBytes: 2 << 20},
	}
	if diff := cmp.Diff(want, got); diff != "" {
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
	if got := getMetrics[metricsEntry](t, h); len(got) != 1 {
		t.Errorf("after clearing: %+v", got)
	}
}

func TestClockOffsetFault(t *testing.T) {
	h, _ := dataHarness(t)
	for _, tc := range []struct {
		offset time.Duration
		want   string
	}{
		{30 * time.Second, "2026-12-01T10:00:30Z"},
		{-30 * time.Second, "2026-12-01T09:59:30Z"},
	} {
		must(t, h.s.SetFault(ClockOffset(tc.offset)))
		if e := getMetrics[metricsEntry](t, h)[0]; e.StartedAt != tc.want || e.UptimeMS != 10000 {
			t.Errorf("offset %s: started_at %s, uptime %d ms; want %s, 10000", tc.offset, e.StartedAt, e.UptimeMS, tc.want)
		}
	}
}

func TestOlderFormFault(t *testing.T) {
	h, in := dataHarness(t)
	must(t, h.s.SetFault(Fault{Kind: FaultOlderForm}))
	want := []olderEntry{{
		Status: "success", UUID: in.UUID, Name: "p-c-1", State: StateRunning, StartCount: 1,
		StartedAt: "2026-12-01T10:00:00Z", UptimeS: 10, CPUTimeS: 1, RSSBytes: 1 << 20,
	}}
	if diff := cmp.Diff(want, getMetrics[olderEntry](t, h)); diff != "" {
		t.Errorf("older form (-want +got):\n%s", diff)
	}
}
