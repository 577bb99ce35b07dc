package promscrape

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRates(t *testing.T) {
	metrics := []Metric{{Name: "c", Type: Counter}, {Name: "g", Type: Gauge}}
	at := func(s int) time.Time { return now.Add(time.Duration(s) * time.Second) }
	type step struct {
		samples []Sample
		want    []float64
	}
	c := func(v float64, s int) Sample { return Sample{Metric: 0, Series: "a", Value: v, Timestamp: at(s)} }
	tests := []struct {
		name  string
		steps []step
	}{
		{"first point gives no rate, second does", []step{{[]Sample{c(10, 0)}, nil}, {[]Sample{c(40, 10)}, []float64{3}}}},
		{"reset: value going back gives no rate, then rates from the new base", []step{
			{[]Sample{c(100, 0)}, nil}, {[]Sample{c(5, 10)}, nil}, {[]Sample{c(25, 20)}, []float64{2}},
		}},
		{"same timestamp twice gives no rate", []step{{[]Sample{c(1, 0)}, nil}, {[]Sample{c(2, 0)}, nil}}},
		{"time going back gives no rate", []step{{[]Sample{c(1, 10)}, nil}, {[]Sample{c(2, 5)}, nil}}},
		{"huge rate dropped", []step{{[]Sample{c(0, 0)}, nil}, {[]Sample{c(1e12, 1)}, nil}}},
		{"infinite value gives no rate", []step{{[]Sample{c(0, 0)}, nil}, {[]Sample{c(math.Inf(1), 1)}, nil}}},
		{"gauges pass unchanged", []step{{[]Sample{{Metric: 1, Value: 7, Timestamp: at(0)}}, []float64{7}}}},
		{"a series unseen for a tick is forgotten", []step{{[]Sample{c(10, 0)}, nil}, {nil, nil}, {[]Sample{c(20, 20)}, nil}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRates()
			for i, st := range tt.steps {
				var got []float64
				for _, s := range r.Apply("t", metrics, st.samples) {
					got = append(got, s.Value)
				}
				r.Sweep()
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Fatalf("step %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestRatesKeepTargetsApart(t *testing.T) {
	metrics := []Metric{{Name: "c", Type: Counter}}
	r := NewRates()
	r.Apply("t1", metrics, []Sample{{Series: "a", Value: 10, Timestamp: now}})
	r.Apply("t2", metrics, []Sample{{Series: "a", Value: 1000, Timestamp: now}})
	r.Sweep()
	got := r.Apply("t1", metrics, []Sample{{Series: "a", Value: 20, Timestamp: now.Add(5 * time.Second)}})
	if len(got) != 1 || got[0].Value != 2 {
		t.Fatalf("rate of t1 = %+v, want 2/s", got)
	}
	if r.Len() != 2 {
		t.Fatalf("series held = %d, want 2", r.Len())
	}
}
