package fakekubelet

import (
	"math/bits"
	"time"

	"k8s.io/utils/clock"
)

// instant is a point in time as an offset from a timeline's epoch. Offsets
// come from the clock's monotonic reading, so they never go backwards.
type instant time.Duration

// timeline maps clock readings to sample instants.
type timeline struct {
	clock    clock.Clock
	start    time.Time     // clock reading at creation, with its monotonic part
	epoch    time.Time     // wall time of instant 0, aligned to the interval
	offset   time.Duration // start - epoch
	interval time.Duration // sample quantum; <= 0 means exact
}

func newTimeline(c clock.Clock, interval time.Duration) *timeline {
	start := c.Now()
	epoch := start.Round(0)
	if interval > 0 {
		epoch = epoch.Truncate(interval)
	}
	return &timeline{clock: c, start: start, epoch: epoch, offset: start.Round(0).Sub(epoch), interval: interval}
}

// now returns the current sample instant: the latest interval boundary not
// after the clock's current reading.
func (tl *timeline) now() instant {
	d := tl.clock.Since(tl.start) + tl.offset
	if tl.interval > 0 {
		r := d % tl.interval
		d -= r
		if r < 0 {
			d -= tl.interval
		}
	}
	return instant(d)
}

// wall returns the wall-clock time of an instant.
func (tl *timeline) wall(i instant) time.Time { return tl.epoch.Add(time.Duration(i)) }

// counter integrates a CPU rate (nanocores) into core-nanoseconds.
type counter struct {
	acc   uint64  // value at accAt
	accAt instant // origin of the current segment
	rate  uint64  // nanocores since accAt
}

// at returns the counter's value at instant t. Instants before the current
// segment report the value at its start.
func (c counter) at(t instant) uint64 {
	if t <= c.accAt {
		return c.acc
	}
	return c.acc + mulDiv(c.rate, uint64(t-c.accAt))
}

// setRate changes the rate from instant t on.
func (c *counter) setRate(t instant, rate uint64) {
	if t > c.accAt {
		c.acc = c.at(t)
		c.accAt = t
	}
	c.rate = rate
}

// mulDiv returns rate*ns/1e9 without overflow for any realistic inputs.
func mulDiv(rate, ns uint64) uint64 {
	hi, lo := bits.Mul64(rate, ns)
	if hi >= 1e9 {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, 1e9)
	return q
}
