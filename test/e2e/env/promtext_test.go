package env

import (
	"testing"
)

func TestPromValue(t *testing.T) {
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
			got, found, err := PromValue(body, tc.metric, tc.labels...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want || found != tc.wantFound {
				t.Errorf("got %v (found %v), want %v (found %v)", got, found, tc.want, tc.wantFound)
			}
		})
	}
	if _, _, err := PromValue("not { prometheus", "x"); err == nil {
		t.Error("malformed text parsed")
	}
}
