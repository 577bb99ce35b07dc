package group

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Bucket is one bucket of a classic Prometheus histogram: how many
// observations (or, over a window, how many per second) were at most
// UpperBound, the bucket's le label.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// smallDelta is the relative difference between the counts of two
// neighbouring buckets that Quantile treats as a rounding error, as
// Prometheus does (smallDeltaTolerance in promql/quantile.go).
const smallDelta = 1e-12

// Quantile estimates the q-quantile of what buckets count, as Prometheus's
// histogram_quantile does for a classic histogram: promql.BucketQuantile in
// prometheus/prometheus (promql/quantile.go at v0.316.0), which
// test/monitoring's TestQuantileMatchesPrometheus holds this function to.
// The buckets are sorted by upper bound and those of one bound added up, so
// the buckets of several pods, given together, estimate their sum's
// quantile (a group's, as sum by (le) does in PromQL). Counts are made
// monotonic: a difference within a relative 1e-12 of the count below is
// ignored either way, and a decrease is lifted to the count below. The
// estimate interpolates linearly within the bucket the rank falls in, from
// the bound of the bucket below (from 0 below the lowest bucket when its
// bound is above 0; the lowest bound itself when it is not), and is the
// second-highest bound when the rank falls in the +Inf bucket.
//
// It is written here rather than imported because promql's module is the
// whole Prometheus server's dependency graph. Where Prometheus answers NaN
// or an infinity, Quantile answers an error that says why, since the HPA
// needs a finite value or none: q outside [0, 1], no buckets, a bound that
// is NaN or a count that is negative or not finite, no +Inf bucket, fewer
// than two bounds, no observation at all (no request in the window has no
// latency), or an estimate that is not finite. buckets is not modified.
func Quantile(q float64, buckets []Bucket) (float64, error) {
	switch {
	case math.IsNaN(q) || q < 0 || q > 1:
		return 0, fmt.Errorf("quantile %v is not within [0, 1]", q)
	case len(buckets) == 0:
		return 0, errors.New("no buckets")
	}
	for _, b := range buckets {
		if math.IsNaN(b.UpperBound) || math.IsNaN(b.Count) || math.IsInf(b.Count, 0) || b.Count < 0 {
			return 0, fmt.Errorf("bucket le=%v has count %v: want a finite count of at least 0 under a bound", b.UpperBound, b.Count)
		}
	}
	bs := slices.Clone(buckets)
	slices.SortStableFunc(bs, func(a, b Bucket) int {
		switch {
		case a.UpperBound < b.UpperBound:
			return -1
		case a.UpperBound > b.UpperBound:
			return 1
		}
		return 0
	})
	if !math.IsInf(bs[len(bs)-1].UpperBound, 1) {
		return 0, errors.New("no +Inf bucket")
	}
	bs = coalesce(bs)
	monotonic(bs)
	if len(bs) < 2 {
		return 0, errors.New("fewer than two bucket bounds")
	}
	observations := bs[len(bs)-1].Count
	if observations == 0 {
		return 0, errors.New("no observations")
	}
	rank := q * observations
	i := sort.Search(len(bs)-1, func(i int) bool { return bs[i].Count >= rank })
	switch {
	case i == len(bs)-1:
		return bs[len(bs)-2].UpperBound, nil
	case i == 0 && bs[0].UpperBound <= 0:
		return bs[0].UpperBound, nil
	}
	start, count := 0.0, bs[i].Count
	if i > 0 {
		start = bs[i-1].UpperBound
		count -= bs[i-1].Count
		rank -= bs[i-1].Count
	}
	// An empty lowest bucket at q = 0 divides 0 by 0, where Prometheus
	// answers NaN. Rounding can carry the sum a few ulps past the bucket's
	// bound, which exact arithmetic never leaves (FuzzQuantile found
	// 0.20000000000000284 for le=0.2): the estimate is held within it.
	if v := start + (bs[i].UpperBound-start)*(rank/count); finite(v) {
		return min(max(v, start), bs[i].UpperBound), nil
	}
	return 0, fmt.Errorf("the %v-quantile falls in an empty bucket (le=%v)", q, bs[i].UpperBound)
}

// coalesce adds up the counts of sorted buckets of one bound.
func coalesce(bs []Bucket) []Bucket {
	out := bs[:1]
	for _, b := range bs[1:] {
		if last := &out[len(out)-1]; b.UpperBound == last.UpperBound {
			last.Count += b.Count
			continue
		}
		out = append(out, b)
	}
	return out
}

// monotonic makes the counts of sorted, coalesced buckets non-decreasing:
// a count within a relative smallDelta of the last one kept takes its
// value, and so does a count below it.
func monotonic(bs []Bucket) {
	prev := bs[0].Count
	for i := 1; i < len(bs); i++ {
		switch curr := bs[i].Count; {
		case curr == prev:
		case nearlyEqual(prev, curr) || curr < prev:
			bs[i].Count = prev
		default:
			prev = curr
		}
	}
}

// nearlyEqual says whether a and b, both finite and at least 0, differ by
// less than smallDelta relative to their sum (almost.Equal in
// prometheus/prometheus util/almost).
func nearlyEqual(a, b float64) bool {
	const minNormal = 0x1p-1022 // the smallest positive normal float64
	diff, sum := math.Abs(a-b), a+b
	if a == 0 || b == 0 || sum < minNormal {
		return diff < smallDelta*minNormal
	}
	return diff/math.Min(sum, math.MaxFloat64) < smallDelta
}

// Mean is a histogram's mean over a window, the rate of its _sum over the
// rate of its _count; an error when nothing was observed or either is not
// finite.
func Mean(sumRate, countRate float64) (float64, error) {
	if !finite(sumRate) || !finite(countRate) || countRate <= 0 {
		return 0, fmt.Errorf("no mean of a sum rate of %v over a count rate of %v", sumRate, countRate)
	}
	return sumRate / countRate, nil
}

// Estimate is what a histogram metric serves from its buckets, _sum and
// _count: their mean over the window, or a quantile.
type Estimate struct {
	// Mean serves the mean; otherwise the Quantile-quantile.
	Mean     bool
	Quantile float64
}

// Histogram is the rates of one or more histograms' parts over a window,
// given together: the buckets of all of them (Quantile adds up the buckets
// of one bound), and their _sum and _count rates added up. HasParts says
// whether any part was given.
type Histogram struct {
	Buckets            []Bucket
	SumRate, CountRate float64
	HasParts           bool
}

// Idle reports whether h observed nothing over its window: no count and no
// bucket that moved.
func (h Histogram) Idle() bool {
	if h.CountRate != 0 {
		return false
	}
	for _, b := range h.Buckets {
		if b.Count != 0 {
			return false
		}
	}
	return true
}

// Add gives h the parts of o.
func (h *Histogram) Add(o Histogram) {
	h.Buckets = append(h.Buckets, o.Buckets...)
	h.SumRate += o.SumRate
	h.CountRate += o.CountRate
	h.HasParts = h.HasParts || o.HasParts
}

// Of estimates from h's parts: Mean(SumRate, CountRate), or Quantile over the
// buckets.
func (e Estimate) Of(h Histogram) (float64, error) {
	if e.Mean {
		return Mean(h.SumRate, h.CountRate)
	}
	return Quantile(e.Quantile, h.Buckets)
}
