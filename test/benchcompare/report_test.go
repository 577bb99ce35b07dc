package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestReport(t *testing.T) {
	round := func(server string, n int, cpu, rss, newPod float64) *roundResult {
		return &roundResult{server: server, round: n, values: map[string]float64{
			figCPU: cpu, figPeakRSSAll: rss, figNewPod: newPod,
			figSelectorP50: 2 * cpu, figFloorP50: 2 * 0.1,
		}, notes: []string{"note " + server}}
	}
	results := []*roundResult{
		round(metricsServer.name, 1, 0.30, 100, 20),
		round(groupMetricsServer.name, 1, 0.08, 60, 12),
		round(metricsServer.name, 2, 0.50, 120, 25),
		round(groupMetricsServer.name, 2, 0.11, 40, math.Inf(1)),
		round(metricsServer.name, 3, 0.20, 110, 21),
		round(groupMetricsServer.name, 3, 0.09, 50, math.Inf(1)),
	}
	var b strings.Builder
	printReport(&b, results)
	out := b.String()
	for _, want := range []string{
		"| figure | metrics-server (median of 3) | group-metrics-server (median of 3) | ours / reference | target | met |",
		"| CPU per scrape cycle (s) | 0.300 | 0.090 | 0.30 | <= 0.33 | yes |",
		"| peak RSS, whole round (MiB) | 110 | 50 | 0.45 | <= 0.50 | yes |",
		// Two of three probes missed: the median is a miss, not met.
		"| new pod: Running to first metrics (s) | 21.0 | none | – | <= 0.50 | no |",
		"| list all pods p99 (ms) | – | – | – | <= 0.50 | no |",
		"| figure | ms 1 | gms 1 | ms 2 | gms 2 | ms 3 | gms 3 |",
		"| CPU per scrape cycle (s) | 0.300 | 0.080 | 0.500 | 0.110 | 0.200 | 0.090 |",
		"group-metrics-server round 2:\n  note group-metrics-server\n",
		// Selector list over floor: 0.6 / 0.2 for metrics-server, 0.18 / 0.2 for ours.
		"| p50 | 3.00 | 0.90 | <= 1.10 | yes |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestValidate(t *testing.T) {
	o := NewOptions()
	o.Nodes, o.PodsPerNode, o.Rounds = 500, 30, 3
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("defaults are invalid: %v", errs)
	}
	o.Resolution = 5 * time.Second
	o.RequestTimeout = 5 * time.Second
	o.Clients = 0
	o.Namespaces = 20000
	if errs := o.Validate(); len(errs) != 4 {
		t.Errorf("got %d errors, want 4 (resolution, timeout, clients, namespaces): %v", len(errs), errs)
	}
}
