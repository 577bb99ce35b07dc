package monitoring

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/promql"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// TestQuantileMatchesPrometheus holds group.Quantile to Prometheus's own
// histogram_quantile for classic histograms (promql.BucketQuantile) on
// seeded bucket sets: unsorted, with bounds given twice, decreasing
// counts, differences of rounding size, negative bounds, empty buckets and
// no observation at all. Where Prometheus answers a number, Quantile
// answers the same; where it answers NaN or an infinity, an error.
func TestQuantileMatchesPrometheus(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 12))
	bounds := []float64{-1, 0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, math.Inf(1)}
	qs := []float64{0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1}
	compared, errs := 0, 0
	for range 3000 {
		n := 1 + rng.IntN(8)
		buckets := make([]group.Bucket, 0, n+1)
		count := 0.0
		for _, b := range rng.Perm(len(bounds) - 1)[:n] {
			switch rng.IntN(6) {
			case 0: // a decrease
				count = math.Max(0, count-float64(rng.IntN(5)))
			case 1: // a rounding-size step
				count += count * 1e-13
			default:
				count += float64(rng.IntN(20))
			}
			buckets = append(buckets, group.Bucket{UpperBound: bounds[b], Count: count})
			if rng.IntN(10) == 0 { // the same bound again
				buckets = append(buckets, group.Bucket{UpperBound: bounds[b], Count: float64(rng.IntN(3))})
			}
		}
		if rng.IntN(20) != 0 { // now and then no +Inf bucket
			buckets = append(buckets, group.Bucket{UpperBound: math.Inf(1), Count: count + float64(rng.IntN(3))})
		}
		rng.Shuffle(len(buckets), func(i, j int) { buckets[i], buckets[j] = buckets[j], buckets[i] })
		for _, q := range append(qs, rng.Float64()) {
			compared++
			if !agree(t, q, buckets) {
				return
			}
			if _, err := group.Quantile(q, buckets); err != nil {
				errs++
			}
		}
	}
	t.Logf("%d estimates compared, %d of them errors where Prometheus answers NaN or an infinity", compared, errs)
}

// FuzzQuantileMatchesPrometheus is TestQuantileMatchesPrometheus on any
// four buckets, one of them +Inf.
func FuzzQuantileMatchesPrometheus(f *testing.F) {
	f.Add(0.5, 0.1, 1.0, 0.2, 3.0, 0.5, 2.0, 4.0)
	f.Add(0.99, -1.0, 0.0, 1.0, 5.0, 1.0, 5.0, 5.0)
	f.Add(0.0, 0.5, 0.0, 0.5, 0.0, 1.0, 0.0, 0.0)
	f.Fuzz(func(t *testing.T, q, b1, c1, b2, c2, b3, c3, cInf float64) {
		agree(t, q, []group.Bucket{{UpperBound: b1, Count: c1}, {UpperBound: b2, Count: c2}, {UpperBound: b3, Count: c3}, {UpperBound: math.Inf(1), Count: cInf}})
	})
}

// agree checks Quantile against promql.BucketQuantile on the same input,
// within rounding (their sorts add the counts of one bound in different
// orders). Counts Prometheus assumes away (negative, NaN, infinite) are
// an error of Quantile's alone.
func agree(t *testing.T, q float64, buckets []group.Bucket) bool {
	t.Helper()
	got, err := group.Quantile(q, buckets)
	prom := make(promql.Buckets, len(buckets))
	for i, b := range buckets {
		if b.Count < 0 || math.IsNaN(b.Count) || math.IsInf(b.Count, 0) || math.IsNaN(b.UpperBound) {
			if err == nil {
				t.Errorf("Quantile(%v, %v) = %v, want an error for count %v", q, buckets, got, b.Count)
				return false
			}
			return true
		}
		prom[i] = promql.Bucket{UpperBound: b.UpperBound, Count: b.Count}
	}
	want, _, _, _, _, _ := promql.BucketQuantile(q, slices.Clone(prom))
	switch {
	case math.IsNaN(want) || math.IsInf(want, 0):
		if err == nil {
			t.Errorf("Quantile(%v, %v) = %v, Prometheus %v: want an error", q, buckets, got, want)
			return false
		}
	case err != nil:
		t.Errorf("Quantile(%v, %v): %v, Prometheus %v", q, buckets, err, want)
		return false
	case math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)):
		t.Errorf("Quantile(%v, %v) = %v, Prometheus %v", q, buckets, got, want)
		return false
	}
	return true
}
