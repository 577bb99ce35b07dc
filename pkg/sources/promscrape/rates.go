package promscrape

import (
	"math"
	"time"
)

// maxRate bounds a counter's rate: anything above is a reset or garbage,
// never load (1e9 events per second is beyond any serving engine or GPU).
const maxRate = 1e9

type point struct {
	value float64
	ts    time.Time
	seen  uint64
}

type seriesID struct {
	target string
	metric int
	series string
}

// Rates turns counter samples into per-second rates. It keeps the last
// point of each counter series (the previous point is only needed while the
// new one is read, so "the last two points" are the kept one and the one
// being added). A value going back is a reset: no rate for that scrape, the
// new value becomes the base. A zero or negative time step, or a rate above
// maxRate, gives no rate either. Series are kept per target incarnation
// (Target.incarnation: the pod's UID with the target's ID), so a pod
// recreated under its old name begins new series rather than continuing
// the old pod's. Not safe for concurrent use.
type Rates struct {
	last map[seriesID]point
	gen  uint64
}

// NewRates returns an empty tracker.
func NewRates() *Rates { return &Rates{last: map[seriesID]point{}} }

// Apply replaces the samples of counter metrics by their rates, dropping
// the ones without a rate yet, and returns the kept samples. Gauges pass
// unchanged. Call Sweep once per tick, after every target's Apply, to
// forget series that were not seen.
func (r *Rates) Apply(target string, metrics []Metric, samples []Sample) []Sample {
	out := samples[:0]
	for _, s := range samples {
		if metrics[s.Metric].Type != Counter {
			out = append(out, s)
			continue
		}
		id := seriesID{target: target, metric: s.Metric, series: s.Series}
		prev, ok := r.last[id]
		r.last[id] = point{value: s.Value, ts: s.Timestamp, seen: r.gen}
		if !ok {
			continue
		}
		dt := s.Timestamp.Sub(prev.ts).Seconds()
		dv := s.Value - prev.value
		if dt <= 0 || dv < 0 || math.IsNaN(dv) {
			continue
		}
		rate := dv / dt
		if math.IsInf(rate, 0) || rate > maxRate {
			continue
		}
		s.Value = rate
		out = append(out, s)
	}
	return out
}

// Sweep forgets the series not seen since the previous Sweep (pods gone,
// targets failing), so memory follows the live series.
func (r *Rates) Sweep() {
	for id, p := range r.last {
		if p.seen != r.gen {
			delete(r.last, id)
		}
	}
	r.gen++
}

// Len is the number of counter series held.
func (r *Rates) Len() int { return len(r.last) }
