package ukpd

import (
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// Instance states that the source tells apart.
const (
	stateRunning  = "running"
	stateStandby  = "standby"
	stateStopped  = "stopped"
	stateDraining = "draining"
	stateStopping = "stopping"
)

// timeline is what the source remembers of an instance from one scrape to
// the next, and the point it derived for it.
//
// ukpd gives no sample timestamps, and its started_at is by its own clock,
// in whole seconds, while the source only knows when a response arrived, by
// its own clock. A rate that divides by the difference of one clock's time
// and the other's is off by their offset: ukpd 3 s ahead makes a 10 s old
// instance read 43% high. So every span the store divides by is measured on
// one clock only, and started_at only tells one start from the next:
//
//   - Between two samples of one run, the timestamp advances by the uptime
//     the instance gained, in ukpd's own terms (uptime_ms); without uptime,
//     by the time between the two arrivals.
//   - An instance first seen that started once has run for all of its
//     uptime: that is the time since its start, and the first sample
//     yields the average since then. Otherwise the first sample yields no
//     rate.
//   - After a new start (a restart or a wake from standby: start_count or
//     started_at changed) the counter starts over, and the previous sample
//     stands in for the start: the time since the start is the time between
//     the arrivals. When the instance stood by at the previous sample, that
//     is exactly the average over the interval, zero for the time it slept;
//     otherwise the previous run's last part is missed, so the rate can
//     only read low, never high. If the counter did not go back, it was
//     not reset: the platform's 2024 API says CPU time accumulates over
//     starts (unikraft-cloud/openapi platform.yaml at 3ad3989,
//     /instances/metrics), today's documentation that it starts over at
//     each start, and a server of either kind is read from its data. A
//     counter that kept counting across the start goes on as one series,
//     the rate over the interval including any time asleep; were it one
//     that started over and already passed its old value, the rate reads
//     low (the interval's usage is at least the difference), never high.
//   - Standing by, the counter is frozen: the timestamp advances by the time
//     between arrivals, and the rate is zero.
type timeline struct {
	count     uint64
	reported  time.Time // started_at as ukpd reported it
	state     string
	uptime    time.Duration
	hasUptime bool
	arrival   time.Time // when the sample arrived, by the source's clock
	// point is what was reported for the instance; has says whether
	// anything was.
	point sources.Point
	has   bool
}

// advance returns the timeline after sample s, in state, arrived at now;
// prev is the timeline of the previous scrape, nil for an instance not seen
// in it. The point is to be reported if has is set.
//
//   - running: the usage since the previous sample, or since the start.
//   - standby: the CPU counter stands still and the resident set is what
//     ukpd reports (0): the pod reads zero CPU, not "no metrics".
//   - draining, stopping: the instance still runs for kraftlet, which
//     reports its pod Running. The previous point is reported again, so
//     the last usage is served until it is stale.
//   - anything else (stopped, starting, unknown): nothing.
func advance(prev *timeline, s Sample, state string, now time.Time) timeline {
	next := timeline{
		count: s.StartCount, reported: s.StartedAt, state: state,
		uptime: s.Uptime, hasUptime: s.HasUptime, arrival: now,
	}
	switch state {
	case stateRunning, stateStandby:
	case stateDraining, stateStopping:
		if prev != nil && prev.has {
			next.point, next.has = prev.point, true
		}
		return next
	default:
		return next
	}
	p := sources.Point{CPUCoreNanos: s.CPUCoreNanos, MemoryBytes: s.RSSBytes}
	next.has = true
	if prev == nil || !prev.has {
		p.Timestamp, p.StartTime = now, now
		if state == stateRunning && s.HasUptime && s.StartCount <= 1 {
			p.StartTime = now.Add(-s.Uptime)
		}
		next.point = p
		return next
	}
	sameStart := prev.count == s.StartCount && prev.reported.Equal(s.StartedAt)
	switch {
	case sameStart && state == stateRunning && prev.state == stateRunning &&
		s.HasUptime && prev.hasUptime && s.Uptime >= prev.uptime:
		p.Timestamp = prev.point.Timestamp.Add(s.Uptime - prev.uptime)
	default:
		p.Timestamp = prev.point.Timestamp.Add(max(now.Sub(prev.arrival), 0))
	}
	switch {
	case sameStart:
		p.StartTime = prev.point.StartTime
	case s.CPUCoreNanos < prev.point.CPUCoreNanos:
		p.StartTime = prev.point.Timestamp
	default:
		// The start moved but the counter did not go back: cumulative
		// over starts, or started_at moved without a restart (a clock
		// that was set). One series goes on.
		p.StartTime = prev.point.StartTime
	}
	next.point = p
	return next
}
