package main

import (
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"

	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// procDir writes a /proc/7/<file> of content under a temporary directory
// and returns the directory.
func procDir(t *testing.T, file, content string) string {
	t.Helper()
	dir := t.TempDir()
	err := os.Mkdir(filepath.Join(dir, "7"), 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "7", file), []byte(content), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestParseStatCPU(t *testing.T) {
	tail := strings.Repeat(" 0", 52-25) // the fields a kernel writes after the 25th
	for _, tc := range []struct {
		name    string
		stat    string
		want    float64
		wantErr bool
	}{
		{
			name: "plain",
			stat: "4242 (metrics-server) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 566 0 0 20 0 12 0 100 2000000 5000 18446744073709551615" + tail,
			want: 18.00,
		},
		{
			name: "command with spaces and parentheses",
			stat: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 1 1 1 1" + tail,
			want: 3.00,
		},
		{name: "truncated", stat: "7 (x) R 1 7", wantErr: true},
		{name: "no command", stat: "7 x R", wantErr: true},
		{name: "not a number", stat: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 ten 50 0" + tail, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stat, err := ofProc(procDir(t, "stat", tc.stat), 7, procfs.Proc.Stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got := stat.CPUTime(); !tc.wantErr && math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("cpu = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tkube-apiserver\nVmPeak:\t 2000000 kB\nVmHWM:\t  300000 kB\nVmRSS:\t  250000 kB\nRssAnon:\t  200000 kB\nRssFile:\t   50000 kB\nThreads:\t12\n"
	got, err := readStatus(procDir(t, "status", status), 7)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{250000 << 10, 300000 << 10, 200000 << 10, 50000 << 10}
	if diff := cmp.Diff(want, []uint64{got.VmRSS, got.VmHWM, got.RssAnon, got.RssFile}); diff != "" {
		t.Errorf("VmRSS, VmHWM, RssAnon, RssFile (-want +got):\n%s", diff)
	}
	if _, err := readStatus(procDir(t, "status", "Name:\tkthreadd\nThreads:\t1\n"), 7); err == nil {
		t.Error("a status without VmRSS parsed without error")
	}
}

const exposition = `# HELP group_metrics_server_scraper_cycle_duration_seconds [ALPHA] Time ...
# TYPE group_metrics_server_scraper_cycle_duration_seconds histogram
group_metrics_server_scraper_cycle_duration_seconds_bucket{le="0.05"} 3
group_metrics_server_scraper_cycle_duration_seconds_bucket{le="+Inf"} 7
group_metrics_server_scraper_cycle_duration_seconds_sum 1.75
group_metrics_server_scraper_cycle_duration_seconds_count 7
group_metrics_server_scraper_target_failures_total{reason="timeout",source="kubelet"} 2
group_metrics_server_scraper_target_failures_total{reason="connection",source="kubelet"} 3
metrics_server_kubelet_request_total{success="false"} 4
metrics_server_kubelet_request_total{success="true"} 1000
metrics_server_kubelet_request_duration_seconds_bucket{node="n1",le="0.005"} 1
apiserver_request_total{code="200"} 12
`

// TestSamples reads each kind's window end from the exposition: only the
// families asked for are parsed, and a name that is a prefix of another
// name does not take its series.
func TestSamples(t *testing.T) {
	gms, ms := groupMetricsServer, metricsServer
	fams, err := promtext.Families(exposition, gms.cycleMetric, gms.failureMetric, ms.failureMetric)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{gms.cycleMetric, gms.failureMetric, ms.failureMetric}, slices.Sorted(maps.Keys(fams))); diff != "" {
		t.Errorf("families parsed (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		kind serverKind
		want windowEnd
	}{
		{"every failure", gms, windowEnd{cycleSum: 1.75, cycleCount: 7, failures: 5}},
		{"failures matched", serverKind{cycleMetric: gms.cycleMetric, failureMetric: gms.failureMetric, failureMatch: map[string]string{"reason": "timeout"}},
			windowEnd{cycleSum: 1.75, cycleCount: 7, failures: 2}},
		{"metrics-server failures", serverKind{cycleMetric: gms.cycleMetric, failureMetric: ms.failureMetric, failureMatch: ms.failureMatch},
			windowEnd{cycleSum: 1.75, cycleCount: 7, failures: 4}},
		{"prefix of a name", serverKind{cycleMetric: gms.cycleMetric, failureMetric: "metrics_server_kubelet_request"},
			windowEnd{cycleSum: 1.75, cycleCount: 7}},
	} {
		got, err := tc.kind.windowEnd(fams)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(windowEnd{})); diff != "" {
			t.Errorf("%s: window end (-want +got):\n%s", tc.name, diff)
		}
	}
	if _, err := ms.windowEnd(fams); err == nil {
		t.Error("found a histogram that is not there")
	}
	if _, err := promtext.Families("group_metrics_server_x{a=\"b\"}\n", "group_metrics_server_x"); err == nil {
		t.Error("a sample without a value parsed without error")
	}
}

func TestPercentileAndMedian(t *testing.T) {
	values := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		p, want float64
	}{
		{50, 5}, {99, 10}, {100, 10}, {10, 1}, {1, 1}, {90, 9},
	} {
		if got := percentile(values, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if values[0] != 5 {
		t.Error("percentile sorted its argument")
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
	for _, tc := range []struct {
		name   string
		values []float64
		want   float64
	}{
		{"odd", []float64{3, 1, 2}, 2},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"NaN left out", []float64{math.NaN(), 1, 3}, 2},
		{"a miss counts", []float64{1, math.Inf(1), math.Inf(1)}, math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := median(tc.values); got != tc.want {
				t.Errorf("median = %v, want %v", got, tc.want)
			}
		})
	}
	if !math.IsNaN(median([]float64{math.NaN()})) {
		t.Error("median of only NaN is not NaN")
	}
}
