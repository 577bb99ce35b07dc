package store

import (
	"math/bits"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// maxCores bounds a plausible CPU rate. A larger value can only come from a
// counter that was reset or a clock that jumped, so it is never served.
const maxCores = 10000

// maxMinWindow is MinWindow at a resolution of 6 s or more. The kubelet's
// Summary stamps its samples and start times to the whole second
// (metav1.Time), so a window it reports as 1 s lasted anywhere from 0 to 2 s
// and its rate could be off by 2x; at 5 s the error is at most a fifth.
const maxMinWindow = 5 * time.Second

// MinWindow is the shortest window a rate is computed over, between two
// samples or since start for a first one, at a scrape resolution: 5 s, or
// one second under the resolution when that is shorter. Two samples one
// resolution apart read as up to a second less: through the Summary's whole
// seconds when the first was taken later in its second than the other (a
// first scrape slowed by its connections' set-up, say), and by the
// scheduling jitter where the times are the scraper's own (ukpd's). So at
// the 5 s floor of --metric-resolution a regular tick may report 4 s: the
// minimum holds back early scrapes, never a tick.
func MinWindow(resolution time.Duration) time.Duration {
	return min(maxMinWindow, resolution-time.Second)
}

// Usage is a CPU rate and a memory reading.
type Usage struct {
	// Timestamp is the end of the window, by the sample's own clock.
	Timestamp time.Time
	// Window is the span the CPU rate was computed over.
	Window time.Duration
	// CPUNanoCores is CPU usage in billionths of a core.
	CPUNanoCores uint64
	// MemoryBytes is the working set (or resident set) in bytes.
	MemoryBytes uint64
}

// series is the state of one node or container: its latest sample, the
// baseline for the next rate, and the last usage derived.
type series struct {
	last  sources.Point
	usage Usage
	// derivedAt is when usage was derived, by the scraper's clock. Usage is
	// served only while derivedAt is recent, whatever the sample clocks say.
	derivedAt time.Time
}

func (s *series) hasUsage() bool { return s.usage.Window > 0 }

// rates holds the rules that turn samples into usage.
type rates struct {
	// minWindow is the shortest window a rate is computed over (MinWindow).
	minWindow time.Duration
	// firstWindowMax is the longest time since a counter's start over which a
	// first sample alone yields a rate (counter / time since start).
	firstWindowMax time.Duration
}

// next derives the series that follows prev (nil for a new series) when p
// arrives at scrapedAt.
//
// A start time counts as a restart only when it is not before the previous
// sample, as metrics-server v0.8.0 has it (pkg/storage/pod.go, Store): on
// cadvisor-backed kubelets (CRI-O) start times are derived from cgroup
// times and move forward. Then:
//
//   - No restart, timestamp at least minWindow later, counter not lower:
//     the rate over the two samples, whatever the start time says.
//   - The same sample again (the kubelet had nothing newer), or one less
//     than minWindow later (an early scrape just before or after a tick):
//     prev unchanged but for memory, so the baseline stays and the next
//     window is long enough; if prev has no usage yet, the average since
//     start when it can be had (below).
//   - A new series, or a restart whose counter went back (it began at zero
//     again): if the counter started at most firstWindowMax before the
//     sample (and at least minWindow), the average since start, which is
//     exact for a new container up to the start time's precision.
//   - Anything else (a counter or timestamp that went back without a
//     restart; a start time past the previous sample with a counter that
//     did not go back, which a restart cannot explain): p becomes the
//     baseline and the previous usage, if any, is kept until it is stale. A
//     lifetime counter is never divided by a short time since start.
func (r rates) next(prev *series, p sources.Point, scrapedAt time.Time) series {
	firstRate := prev == nil
	if prev != nil {
		if !restarted(prev.last, p) {
			switch dt := p.Timestamp.Sub(prev.last.Timestamp); {
			case dt >= r.minWindow && p.CPUCoreNanos >= prev.last.CPUCoreNanos:
				if u, ok := rate(p.CPUCoreNanos-prev.last.CPUCoreNanos, dt, p); ok {
					return series{last: p, usage: u, derivedAt: scrapedAt}
				}
			case dt == 0 && p.CPUCoreNanos == prev.last.CPUCoreNanos,
				dt > 0 && p.CPUCoreNanos >= prev.last.CPUCoreNanos:
				if !prev.hasUsage() {
					if s, ok := r.sinceStart(p, scrapedAt); ok {
						return s
					}
				}
				s := *prev
				s.usage.MemoryBytes = p.MemoryBytes
				return s
			}
		} else {
			firstRate = p.CPUCoreNanos < prev.last.CPUCoreNanos
		}
	}
	if firstRate {
		if s, ok := r.sinceStart(p, scrapedAt); ok {
			return s
		}
	}
	s := series{last: p}
	if prev != nil && prev.hasUsage() {
		s.usage, s.derivedAt = prev.usage, prev.derivedAt
	}
	return s
}

// sinceStart is the series whose first usage is p's counter averaged since
// its start, when that start is at least minWindow and at most
// firstWindowMax before p.
func (r rates) sinceStart(p sources.Point, scrapedAt time.Time) (series, bool) {
	if p.StartTime.IsZero() {
		return series{}, false
	}
	since := p.Timestamp.Sub(p.StartTime)
	if since < r.minWindow || since > r.firstWindowMax {
		return series{}, false
	}
	u, ok := rate(p.CPUCoreNanos, since, p)
	return series{last: p, usage: u, derivedAt: scrapedAt}, ok
}

// restarted reports whether p's counter began after prev was sampled.
func restarted(prev, p sources.Point) bool {
	return !p.StartTime.IsZero() && !p.StartTime.Before(prev.Timestamp)
}

// rate turns a counter delta (core-nanoseconds) over dt into usage ending
// at p, in whole nanocores (rounded down), computed in integers: delta ×
// 10⁹ / dt, with the 128-bit product of math/bits.
func rate(delta uint64, dt time.Duration, p sources.Point) (Usage, bool) {
	d := uint64(dt.Nanoseconds())
	hi, lo := bits.Mul64(delta, 1e9)
	if d == 0 || hi >= d {
		return Usage{}, false // the quotient would not fit: far above maxCores
	}
	nanoCores, _ := bits.Div64(hi, lo, d)
	if nanoCores > maxCores*1e9 {
		return Usage{}, false
	}
	return Usage{
		Timestamp:    p.Timestamp,
		Window:       dt,
		CPUNanoCores: nanoCores,
		MemoryBytes:  p.MemoryBytes,
	}, true
}
