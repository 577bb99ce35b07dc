package ukpd

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

func TestAdvance(t *testing.T) {
	// ukpd's clock runs 30 s ahead: its started_at never enters a span.
	started := t0.Add(-10*time.Second + 30*time.Second)
	prevAt := t0.Add(-15 * time.Second)
	prevPoint := sources.Point{Timestamp: prevAt.Add(-time.Second), StartTime: prevAt.Add(-time.Minute), CPUCoreNanos: 7e9, MemoryBytes: 1}
	running := func(count uint64, uptime time.Duration) *timeline {
		return &timeline{count: count, reported: started, state: stateRunning, uptime: uptime, hasUptime: true, arrival: prevAt, point: prevPoint, has: true}
	}
	standingBy := func(count uint64, uptime time.Duration) *timeline {
		tl := running(count, uptime)
		tl.state = stateStandby
		return tl
	}
	sample := func(count uint64, cpu uint64, uptime time.Duration) Sample {
		return Sample{StartCount: count, StartedAt: started, CPUCoreNanos: cpu, RSSBytes: 5, Uptime: uptime, HasUptime: true}
	}
	noUptime := func(s Sample) Sample {
		s.Uptime, s.HasUptime = 0, false
		return s
	}
	moved := func(s Sample) Sample {
		s.StartedAt = s.StartedAt.Add(time.Minute)
		return s
	}
	pt := func(at, start time.Time, cpu uint64) *sources.Point {
		return &sources.Point{Timestamp: at, StartTime: start, CPUCoreNanos: cpu, MemoryBytes: 5}
	}
	next := prevPoint.Timestamp.Add(15 * time.Second) // by the time between arrivals
	tests := []struct {
		name   string
		prev   *timeline
		sample Sample
		state  string
		want   *sources.Point // nil: nothing reported
	}{
		{
			name:   "first sight of an instance that started once: the average since it started, by its uptime",
			sample: sample(1, 5e9, 10*time.Second), state: stateRunning, want: pt(t0, t0.Add(-10*time.Second), 5e9),
		},
		{name: "first sight after several starts: a baseline, no rate", sample: sample(3, 5e9, 10*time.Second), state: stateRunning, want: pt(t0, t0, 5e9)},
		{name: "first sight without uptime: a baseline, no rate", sample: noUptime(sample(1, 5e9, 0)), state: stateRunning, want: pt(t0, t0, 5e9)},
		{
			name: "same run: the timestamp advances by the uptime gained, not by the time between arrivals",
			prev: running(1, time.Minute), sample: sample(1, 9e9, time.Minute+14*time.Second), state: stateRunning,
			want: pt(prevPoint.Timestamp.Add(14*time.Second), prevPoint.StartTime, 9e9),
		},
		{name: "same run without uptime: by the time between arrivals", prev: running(1, time.Minute), sample: noUptime(sample(1, 9e9, 0)), state: stateRunning, want: pt(next, prevPoint.StartTime, 9e9)},
		{
			name: "standby: the counter stands still over the time between arrivals",
			prev: running(1, time.Minute), sample: sample(1, 7e9, time.Minute), state: stateStandby, want: pt(next, prevPoint.StartTime, 7e9),
		},
		{
			name: "a wake: the previous sample stands in for the start",
			prev: standingBy(1, time.Minute), sample: moved(sample(2, 1e9, time.Minute+5*time.Second)), state: stateRunning,
			want: pt(next, prevPoint.Timestamp, 1e9),
		},
		{
			name: "started_at moved, the counter did not go back: a baseline, no rate",
			prev: running(1, time.Minute), sample: moved(sample(1, 9e9, time.Minute+15*time.Second)), state: stateRunning,
			want: pt(next, prevPoint.Timestamp, 9e9),
		},
		{
			name: "start_count moved, started_at did not: still a new start",
			prev: running(1, time.Minute), sample: sample(2, 1e9, time.Minute+5*time.Second), state: stateRunning, want: pt(next, prevPoint.Timestamp, 1e9),
		},
		{
			name: "woken and back in standby between two scrapes",
			prev: standingBy(1, time.Minute), sample: sample(2, 1e9, time.Minute+5*time.Second), state: stateStandby, want: pt(next, prevPoint.Timestamp, 1e9),
		},
		{name: "draining: the previous point again", prev: running(1, time.Minute), sample: sample(1, 9e9, time.Minute+14*time.Second), state: stateDraining, want: &prevPoint},
		{name: "draining, first sight: nothing", sample: sample(1, 9e9, time.Minute), state: stateDraining},
		{name: "stopped: nothing", prev: running(1, time.Minute), sample: sample(1, 9e9, time.Minute), state: stateStopped},
		{name: "starting: nothing", prev: running(1, time.Minute), sample: sample(2, 0, time.Minute), state: "starting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := advance(tc.prev, tc.sample, tc.state, t0)
			var gotPoint *sources.Point
			if got.has {
				gotPoint = &got.point
			}
			if diff := cmp.Diff(tc.want, gotPoint); diff != "" {
				t.Errorf("point (-want +got):\n%s", diff)
			}
			if got.arrival != t0 || got.count != tc.sample.StartCount || got.state != tc.state {
				t.Errorf("timeline = %+v, want this sample's arrival, count and state", got)
			}
		})
	}
}

func TestPlausibleCPU(t *testing.T) {
	tests := []struct {
		name  string
		vcpus int
		s     Sample
		want  bool
	}{
		{name: "one vCPU busy", vcpus: 1, s: Sample{CPUCoreNanos: 10e9, Uptime: 10 * time.Second, HasUptime: true}, want: true},
		{name: "room for the VMM's threads", vcpus: 1, s: Sample{CPUCoreNanos: 21e9, Uptime: 10 * time.Second, HasUptime: true}, want: true},
		{name: "more than vCPUs + 1 over the uptime", vcpus: 1, s: Sample{CPUCoreNanos: 22e9, Uptime: 10 * time.Second, HasUptime: true}},
		{name: "no vCPUs reported", s: Sample{CPUCoreNanos: 1e15, Uptime: time.Second, HasUptime: true}, want: true},
		{name: "no uptime reported", vcpus: 1, s: Sample{CPUCoreNanos: 1e15}, want: true},
	}
	for _, tc := range tests {
		if got := plausibleCPU(&Instance{VCPUs: tc.vcpus}, tc.s); got != tc.want {
			t.Errorf("%s: plausibleCPU = %v, want %v", tc.name, got, tc.want)
		}
	}
}
