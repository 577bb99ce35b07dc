package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func pt(ts, start time.Duration, cpu, mem uint64) sources.Point {
	return sources.Point{Timestamp: at(ts), StartTime: at(start), CPUCoreNanos: cpu, MemoryBytes: mem}
}

func TestRatesNext(t *testing.T) {
	r := rates{minWindow: MinWindow(15 * time.Second), firstWindowMax: 30 * time.Second}
	scraped := at(time.Hour)
	prevUsage := Usage{Timestamp: at(-15 * time.Second), Window: 15 * time.Second, CPUNanoCores: 7, MemoryBytes: 9}
	steady := &series{last: pt(0, -time.Hour, 10e9, 100), usage: prevUsage, derivedAt: at(-time.Minute)}
	// The point becomes the last unless want names one; derived is a new
	// usage, kept the previous one, waits none.
	derived := func(ts, window time.Duration, cpu, mem uint64) series {
		return series{usage: Usage{Timestamp: at(ts), Window: window, CPUNanoCores: cpu, MemoryBytes: mem}, derivedAt: scraped}
	}
	kept := series{usage: prevUsage, derivedAt: at(-time.Minute)}
	tests := []struct {
		name string
		// resolution, when set, is the scrape resolution in place of 15 s.
		resolution time.Duration
		prev       *series
		p          sources.Point
		want       series
	}{
		{name: "rate over two samples", prev: steady, p: pt(15*time.Second, -time.Hour, 10e9+3e9, 200), // 3 core-seconds in 15 s
			want: derived(15*time.Second, 15*time.Second, 200_000_000, 200)},
		{name: "first sample of a new container: average since start", p: pt(10*time.Second, 0, 5e9, 50), // 5 core-seconds in 10 s
			want: derived(10*time.Second, 10*time.Second, 500_000_000, 50)},
		{name: "first sample of a container started under 5 s ago waits", p: pt(3*time.Second, 0, 1e9, 50)},
		{name: "first sample of an old container waits for a second", p: pt(0, -time.Hour, 5e9, 50)},
		{name: "restart: new start time, counter from zero", prev: steady, p: pt(15*time.Second, 5*time.Second, 1e9, 60), // 1 core-second in 10 s since restart
			want: derived(15*time.Second, 10*time.Second, 100_000_000, 60)},
		// Finding 5: a start time that moves forward but stays before the
		// previous sample is no restart (metrics-server's rule).
		{name: "start time moved forward, before the previous sample: rate over the two samples", prev: steady,
			p: pt(15*time.Second, -10*time.Second, 10e9+3e9, 200), want: derived(15*time.Second, 15*time.Second, 200_000_000, 200)},
		// Finding 5: 0.5 core for 2 h (3600 core-seconds), then the start
		// jumps to 10 s before the sample. Dividing the lifetime counter
		// by those 10 s read 360 cores.
		{name: "start time jumped past the previous sample, counter kept: a baseline, never the lifetime over 10 s",
			prev: &series{last: pt(0, -2*time.Hour, 3600e9, 100), usage: prevUsage, derivedAt: at(-time.Minute)},
			p:    pt(15*time.Second, 5*time.Second, 3600e9+7.5e9, 100), want: kept},
		{name: "counter went back without a restart: keep the last usage", prev: steady, p: pt(15*time.Second, -time.Hour, 1e9, 60), want: kept},
		{name: "clock went back: keep the last usage", prev: steady, p: pt(-5*time.Second, -time.Hour, 11e9, 60), want: kept},
		{name: "same sample again: nothing new", prev: steady, p: pt(0, -time.Hour, 10e9, 100),
			want: series{usage: Usage{Timestamp: prevUsage.Timestamp, Window: prevUsage.Window, CPUNanoCores: 7, MemoryBytes: 100}, derivedAt: at(-time.Minute)}},
		{name: "huge jump is never served", prev: steady, p: pt(15*time.Second, -time.Hour, 10e9+1e18, 60), want: kept},
		// The Summary's whole-second stamps: a reported 1 s window lasted 0 to 2 s.
		{name: "under MinWindow after the baseline: the baseline and usage stay, memory moves", prev: steady,
			p: pt(time.Second, -time.Hour, 10e9+2e9, 60), want: series{last: steady.last, usage: Usage{
				Timestamp: prevUsage.Timestamp, Window: prevUsage.Window, CPUNanoCores: 7, MemoryBytes: 60}, derivedAt: at(-time.Minute)}},
		{name: "under MinWindow, no usage yet: the average since start", prev: &series{last: pt(4*time.Second, 0, 2e9, 50)},
			p: pt(6*time.Second, 0, 3e9, 60), want: derived(6*time.Second, 6*time.Second, 500_000_000, 60)},
		{name: "under MinWindow, no usage and an old start: the baseline stays", prev: &series{last: pt(0, -time.Hour, 2e9, 50)},
			p: pt(4*time.Second, -time.Hour, 3e9, 60), want: series{last: pt(0, -time.Hour, 2e9, 50), usage: Usage{MemoryBytes: 60}}},
		{name: "a tick read as 4 s at the 5 s resolution: a rate", resolution: 5 * time.Second, prev: steady,
			p: pt(4*time.Second, -time.Hour, 10e9+2e9, 60), want: derived(4*time.Second, 4*time.Second, 500_000_000, 60)},
		{name: "3 s at the 5 s resolution: the baseline and usage stay", resolution: 5 * time.Second, prev: steady,
			p: pt(3*time.Second, -time.Hour, 10e9+2e9, 60), want: series{last: steady.last, usage: Usage{
				Timestamp: prevUsage.Timestamp, Window: prevUsage.Window, CPUNanoCores: 7, MemoryBytes: 60}, derivedAt: at(-time.Minute)}},
		{name: "no start time and no previous sample", p: sources.Point{Timestamp: at(0), CPUCoreNanos: 5, MemoryBytes: 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want.last.Timestamp.IsZero() {
				tc.want.last = tc.p
			}
			r := r
			if tc.resolution > 0 {
				r.minWindow = MinWindow(tc.resolution)
			}
			got := r.next(tc.prev, tc.p, scraped)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(series{})); diff != "" {
				t.Errorf("next (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRateIntegers: nanocores come from integers, exact where float cores
// lose digits, and rates above maxCores (or whose quotient would overflow)
// are refused.
// TestMinWindow: a tick read through whole seconds is never under the
// minimum; the minimum is never over 5 s.
func TestMinWindow(t *testing.T) {
	for resolution, want := range map[time.Duration]time.Duration{
		5 * time.Second: 4 * time.Second, 6 * time.Second: 5 * time.Second, 15 * time.Second: 5 * time.Second, time.Minute: 5 * time.Second,
	} {
		if got := MinWindow(resolution); got != want {
			t.Errorf("MinWindow(%v) = %v, want %v", resolution, got, want)
		}
	}
}

func TestRateIntegers(t *testing.T) {
	tests := []struct {
		name   string
		delta  uint64
		dt     time.Duration
		want   uint64
		wantOK bool
	}{
		{name: "a third of a core", delta: 5_000_000_000, dt: 15 * time.Second, want: 333_333_333, wantOK: true},
		// 1,000,000,080 / 15 = 66,666,672 exactly; through float64 cores
		// it came out as 66,666,671.
		{name: "exact where float cores are not", delta: 1_000_000_080, dt: 15 * time.Second, want: 66_666_672, wantOK: true},
		{name: "just under the bound", delta: 863_999_999_999_913_600, dt: 24 * time.Hour, want: 9_999_999_999_999, wantOK: true},
		{name: "above the bound", delta: 10_001 * 15_000_000_000, dt: 15 * time.Second},
		{name: "quotient past 64 bits", delta: 1 << 63, dt: time.Nanosecond},
		{name: "no time", delta: 1, dt: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, ok := rate(tc.delta, tc.dt, sources.Point{MemoryBytes: 7})
			if ok != tc.wantOK || u.CPUNanoCores != tc.want {
				t.Errorf("rate = %d, %v; want %d, %v", u.CPUNanoCores, ok, tc.want, tc.wantOK)
			}
		})
	}
}
