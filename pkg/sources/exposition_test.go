package sources

import "testing"

func TestNameLen(t *testing.T) {
	for _, tc := range []struct {
		in            string
		metric, label int
	}{
		{"node_cpu_usage_seconds_total{", 28, 28},
		{"a:b_c9 1", 6, 1},
		{"_x", 2, 2},
		{"9x", 0, 0},
		{":x", 2, 0},
		{`"quoted"`, 0, 0},
		{"", 0, 0},
		{"é", 0, 0},
	} {
		if got := MetricNameLen(tc.in); got != tc.metric {
			t.Errorf("MetricNameLen(%q) = %d, want %d", tc.in, got, tc.metric)
		}
		if got := LabelNameLen([]byte(tc.in)); got != tc.label {
			t.Errorf("LabelNameLen(%q) = %d, want %d", tc.in, got, tc.label)
		}
	}
}
