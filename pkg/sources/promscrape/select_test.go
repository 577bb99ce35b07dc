package promscrape

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
)

// TestValueSelect collates two engines' series of one pod and combines a
// subset chosen by a metricLabelSelector with each rule.
func TestValueSelect(t *testing.T) {
	metrics := []Metric{
		{Name: "waiting", Type: Gauge, Combine: CombineSum},
		{Name: "kv", Type: Gauge, Combine: CombineMean},
		{Name: "peak", Type: Gauge, Combine: CombineMax},
	}
	var samples []Sample
	for m := range metrics {
		samples = append(samples,
			Sample{Metric: m, Namespace: "ns", Pod: "p", Series: "engine=0\x00model_name=a\x00", Value: 2, Timestamp: now},
			Sample{Metric: m, Namespace: "ns", Pod: "p", Series: "engine=1\x00model_name=b\x00", Value: 6, Timestamp: now},
			Sample{Metric: m, Namespace: "ns", Pod: "p", Series: "engine=2\x00model_name=b\x00", Value: 4, Timestamp: now},
		)
	}
	b := Collate(metrics, samples)
	if len(b.Pods) != 1 || len(b.Pods[0].Values) != 3 {
		t.Fatalf("Collate = %+v, want one pod with three values", b)
	}
	wantPoints := []Point{
		{Labels: map[string]string{"engine": "0", "model_name": "a"}, Value: 2},
		{Labels: map[string]string{"engine": "1", "model_name": "b"}, Value: 6},
		{Labels: map[string]string{"engine": "2", "model_name": "b"}, Value: 4},
	}
	byName := map[string]Value{}
	for _, v := range b.Pods[0].Values {
		byName[v.Metric] = v
		if diff := cmp.Diff(wantPoints, v.Points); diff != "" {
			t.Errorf("%s points (-want +got):\n%s", v.Metric, diff)
		}
	}
	type result struct {
		Value float64
		OK    bool
	}
	tests := []struct {
		name, metric, selector string
		rule                   Combine
		want                   result
	}{
		{"no selector is the whole value", "waiting", "", CombineSum, result{12, true}},
		{"sum of model b", "waiting", "model_name=b", CombineSum, result{10, true}},
		{"mean of model b", "kv", "model_name=b", CombineMean, result{5, true}},
		{"max of model b", "peak", "model_name=b", CombineMax, result{6, true}},
		{"set selector", "waiting", "engine in (0,2)", CombineSum, result{6, true}},
		{"matches nothing", "waiting", "model_name=c", CombineSum, result{0, false}},
		{"a label no series has", "waiting", "gpu=0", CombineSum, result{0, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sel labels.Selector
			if tt.selector != "" {
				var err error
				if sel, err = labels.Parse(tt.selector); err != nil {
					t.Fatal(err)
				}
			}
			v := byName[tt.metric]
			var got result
			got.Value, got.OK = v.Select(sel, tt.rule)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Select (-want +got):\n%s", diff)
			}
		})
	}
}
