package group

import (
	"math"
	"strings"
	"testing"
)

// vllmTTFT are the bounds of vLLM's time-to-first-token histogram, in
// seconds (a subset, as vllm/v1/metrics/loggers.py declares them), with
// cumulative counts of 100 requests.
var vllmTTFT = []Bucket{{0.02, 5}, {0.04, 20}, {0.06, 50}, {0.08, 70}, {0.1, 80}, {0.25, 95}, {0.5, 99}, {math.Inf(1), 100}}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name    string
		q       float64
		buckets []Bucket
		want    float64
		wantErr string
	}{
		// rank 50 falls at the top of (0.04, 0.06]: 0.06.
		{name: "median", q: 0.5, buckets: vllmTTFT, want: 0.06},
		// rank 90 is 10 of the 15 in (0.1, 0.25].
		{name: "p90 interpolates", q: 0.9, buckets: vllmTTFT, want: 0.1 + 0.15*10/15},
		// rank 99.9 falls in the +Inf bucket: the highest finite bound.
		{name: "p999 in the +Inf bucket", q: 0.999, buckets: vllmTTFT, want: 0.5},
		// rank 2 is 2 of the 5 in (0, 0.02].
		{name: "lowest bucket from 0", q: 0.02, buckets: vllmTTFT, want: 0.02 * 2 / 5},
		{name: "lowest bound at or below 0", q: 0.1, buckets: []Bucket{{-1, 5}, {inf, 10}}, want: -1},
		{name: "unsorted, with a bound given twice", q: 0.5,
			buckets: []Bucket{{inf, 50}, {0.06, 30}, {0.04, 10}, {0.06, 20}, {0.04, 10}, {inf, 50}}, want: 0.06},
		{name: "a decrease is lifted", q: 0.75, buckets: []Bucket{{1, 10}, {2, 4}, {4, 20}, {inf, 20}}, want: 3},
		{name: "rates", q: 0.5, buckets: []Bucket{{0.1, 0.5}, {0.2, 1.5}, {inf, 2}}, want: 0.15},
		{name: "q above 1", q: 1.5, buckets: vllmTTFT, wantErr: "not within [0, 1]"},
		{name: "q below 0", q: -0.1, buckets: vllmTTFT, wantErr: "not within [0, 1]"},
		{name: "q NaN", q: math.NaN(), buckets: vllmTTFT, wantErr: "not within [0, 1]"},
		{name: "no buckets", q: 0.5, wantErr: "no buckets"},
		{name: "no +Inf bucket", q: 0.5, buckets: []Bucket{{1, 1}, {2, 2}}, wantErr: "no +Inf bucket"},
		{name: "+Inf alone", q: 0.5, buckets: []Bucket{{inf, 3}}, wantErr: "fewer than two"},
		{name: "nothing observed", q: 0.5, buckets: []Bucket{{1, 0}, {inf, 0}}, wantErr: "no observations"},
		{name: "NaN count", q: 0.5, buckets: []Bucket{{1, math.NaN()}, {inf, 1}}, wantErr: "want a finite count"},
		{name: "negative count", q: 0.5, buckets: []Bucket{{1, -1}, {inf, 1}}, wantErr: "want a finite count"},
		{name: "infinite count", q: 0.5, buckets: []Bucket{{1, 1}, {inf, inf}}, wantErr: "want a finite count"},
		{name: "NaN bound", q: 0.5, buckets: []Bucket{{math.NaN(), 1}, {inf, 1}}, wantErr: "want a finite count"},
		{name: "q 0 in an empty lowest bucket", q: 0, buckets: []Bucket{{1, 0}, {inf, 3}}, wantErr: "empty bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]Bucket(nil), tc.buckets...)
			got, err := Quantile(tc.q, tc.buckets)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Quantile = %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Quantile = %v, %v; want %v", got, err, tc.want)
			}
			for i := range before {
				if before[i] != tc.buckets[i] && !math.IsNaN(before[i].Count) {
					t.Fatalf("the buckets were modified: %v, then %v", before, tc.buckets)
				}
			}
		})
	}
}

func TestMean(t *testing.T) {
	if got, err := Mean(3, 4); err != nil || got != 0.75 {
		t.Errorf("Mean(3, 4) = %v, %v", got, err)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.Inf(1)}, {0, -1}} {
		if got, err := Mean(c[0], c[1]); err == nil {
			t.Errorf("Mean(%v, %v) = %v, want an error", c[0], c[1], got)
		}
	}
}

// FuzzQuantile: for any buckets, an estimate is finite, is not below the
// lowest bound nor above the highest finite one (nor below 0 when every
// bound is above it), and does not decrease as q grows.
func FuzzQuantile(f *testing.F) {
	f.Add(0.5, 0.1, 1.0, 0.2, 3.0, 0.5, 2.0, 4.0)
	f.Add(0.99, -1.0, 0.0, 1.0, 5.0, 1.0, 5.0, 5.0)
	f.Add(0.0, 0.5, 0.0, 0.5, 0.0, 1.0, 0.0, 0.0)
	f.Add(0.9, 0.3, 7.0, 0.1, 9.0, 0.2, 1.0, 12.0)
	f.Fuzz(func(t *testing.T, q, b1, c1, b2, c2, b3, c3, cInf float64) {
		buckets := []Bucket{{b1, c1}, {b2, c2}, {b3, c3}, {math.Inf(1), cInf}}
		got, err := Quantile(q, buckets)
		if err != nil {
			return
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, b := range buckets[:3] {
			lo, hi = math.Min(lo, b.UpperBound), math.Max(hi, b.UpperBound)
		}
		if !finite(got) || got > hi || got < math.Min(lo, 0) {
			t.Fatalf("Quantile(%v, %v) = %v, outside [min(%v, 0), %v]", q, buckets, got, lo, hi)
		}
		for _, q2 := range []float64{q + (1-q)/2, 1} {
			if next, err := Quantile(q2, buckets); err == nil && next < got-1e-9*math.Max(1, math.Abs(got)) {
				t.Fatalf("Quantile(%v) = %v but Quantile(%v) = %v, over %v", q, got, q2, next, buckets)
			}
		}
	})
}
