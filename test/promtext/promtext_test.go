package promtext

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValue(t *testing.T) {
	const body = `# TYPE requests_total counter
requests_total{code="200",group="metrics.k8s.io"} 7
requests_total{code="429",group="metrics.k8s.io"} 2
requests_total{code="200",group="custom.metrics.k8s.io"} 5
# TYPE heap_bytes gauge
heap_bytes 1.5e+06
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.1"} 3
latency_seconds_bucket{le="+Inf"} 4
latency_seconds_sum 0.9
latency_seconds_count 4
`
	tests := []struct {
		name      string
		metric    string
		labels    []string
		want      float64
		wantFound bool
		wantErr   bool
	}{
		{name: "sum over labels", metric: "requests_total", want: 14, wantFound: true},
		{name: "one label", metric: "requests_total", labels: []string{`group="metrics.k8s.io"`}, want: 9, wantFound: true},
		{name: "two labels", metric: "requests_total", labels: []string{`group="metrics.k8s.io"`, `code="429"`}, want: 2, wantFound: true},
		{name: "a label value is matched whole", metric: "requests_total", labels: []string{`group="metrics"`}},
		{name: "gauge", metric: "heap_bytes", want: 1.5e6, wantFound: true},
		{name: "histogram count", metric: "latency_seconds_count", want: 4, wantFound: true},
		{name: "histogram sum", metric: "latency_seconds_sum", want: 0.9, wantFound: true},
		{name: "a prefix is not a name", metric: "requests", labels: nil},
		{name: "absent", metric: "nothing"},
		{name: "bad matcher", metric: "requests_total", labels: []string{`group=metrics`}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := Value(body, tc.metric, tc.labels...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want || found != tc.wantFound {
				t.Errorf("got %v (found %v), want %v (found %v)", got, found, tc.want, tc.wantFound)
			}
		})
	}
	if _, _, err := Value("not { prometheus", "x"); err == nil {
		t.Error("malformed text parsed")
	}
}

// TestFamiliesFilter: with family names, only their lines are parsed, and
// what they keep reads as in a parse of the whole text.
func TestFamiliesFilter(t *testing.T) {
	const body = `# HELP cycle_seconds Time of a cycle.
# TYPE cycle_seconds histogram
cycle_seconds_bucket{le="0.05"} 3
cycle_seconds_bucket{le="+Inf"} 7
cycle_seconds_sum 1.75
cycle_seconds_count 7
failures_total{reason="timeout",source="kubelet"} 2
failures_total{reason="connection",source="kubelet"} 3
failures{x="y"} 1
node_duration_seconds_bucket{node="n1",le="0.005"} 1
this line { is not prometheus
`
	fams, err := Families(body, "cycle_seconds", "failures_total")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"cycle_seconds", "failures_total"}, slices.Sorted(maps.Keys(fams))); diff != "" {
		t.Errorf("families (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		want map[string]string
		v    float64
	}{
		{"cycle_seconds_sum", nil, 1.75},
		{"cycle_seconds_count", nil, 7},
		{"failures_total", nil, 5},
		{"failures_total", map[string]string{"reason": "timeout"}, 2},
	} {
		if v, ok := Sum(fams, tc.name, tc.want); !ok || v != tc.v {
			t.Errorf("Sum(%s, %v) = %v, %v; want %v, true", tc.name, tc.want, v, ok, tc.v)
		}
	}
	if _, err := Families("cycle_seconds_sum\n", "cycle_seconds"); err == nil {
		t.Error("a sample without a value parsed without error")
	}
}
