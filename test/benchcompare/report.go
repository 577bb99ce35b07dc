package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Figure keys.
const (
	figCPU         = "cpu"
	figPeakRSS     = "peak-rss-window"
	figPeakRSSAll  = "peak-rss"
	figSteadyRSS   = "steady-rss"
	figCycle       = "cycle"
	figNewPod      = "new-pod"
	figListAllP50  = "list-all-p50"
	figListAllP99  = "list-all-p99"
	figSelectorP50 = "selector-p50"
	figSelectorP99 = "selector-p99"
	figFloorP50    = "floor-p50"
	figFloorP99    = "floor-p99"
	figReady       = "ready"
	figFailures    = "failures"
	figListed      = "listed"
)

// figure is one row of the table. target, when set, is the highest
// acceptable ratio ours/reference.
type figure struct {
	key, label, format string
	target             float64
}

var figures = []figure{
	{figCPU, "CPU per scrape cycle (s)", "%.3f", 0.33},
	{figPeakRSSAll, "peak RSS, whole round (MiB)", "%.0f", 0.5},
	{figPeakRSS, "peak RSS, before the list load (MiB)", "%.0f", 0},
	{figSteadyRSS, "steady RSS, median (MiB)", "%.0f", 0},
	{figCycle, "scrape cycle wall time, mean (s)", "%.3f", 0},
	{figNewPod, "new pod: Running to first metrics (s)", "%.1f", 0.5},
	{figListAllP50, "list all pods p50 (ms)", "%.1f", 0},
	{figListAllP99, "list all pods p99 (ms)", "%.1f", 0.5},
	{figSelectorP50, "namespaced selector list p50 (ms)", "%.2f", 0.9},
	{figSelectorP99, "namespaced selector list p99 (ms)", "%.2f", 0.9},
	{figFloorP50, "floor: empty namespaced list p50 (ms)", "%.2f", 0},
	{figFloorP99, "floor: empty namespaced list p99 (ms)", "%.2f", 0},
	{figReady, "start to ready (s)", "%.1f", 0},
	{figFailures, "failed node scrapes in the window", "%.0f", 0},
	{figListed, "pods in the list of all pods", "%.0f", 0},
}

// printReport writes the table of medians and every round's raw values.
func printReport(w io.Writer, results []*roundResult) {
	byServer := map[string][]*roundResult{}
	for _, r := range results {
		byServer[r.server] = append(byServer[r.server], r)
	}
	ref, ours := byServer[metricsServer.name], byServer[groupMetricsServer.name]

	fmt.Fprintf(w, "\n| figure | metrics-server (median of %d) | group-metrics-server (median of %d) | ours / reference | target | met |\n",
		len(ref), len(ours))
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | --- |")
	for _, f := range figures {
		a, b := medianOf(ref, f.key), medianOf(ours, f.key)
		ratio := b / a
		target, met := "", ""
		if f.target > 0 {
			target = fmt.Sprintf("<= %.2f", f.target)
			met = "no"
			if ratio <= f.target {
				met = "yes"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", f.label, formatValue(f.format, a), formatValue(f.format, b),
			formatRatio(ratio), target, met)
	}

	printFloor(w, ref, ours)

	fmt.Fprintln(w, "\nPer round (raw values):")
	fmt.Fprintf(w, "\n| figure |")
	for _, r := range results {
		fmt.Fprintf(w, " %s %d |", shortName(r.server), r.round)
	}
	fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" ---: |", len(results)))
	for _, f := range figures {
		fmt.Fprintf(w, "| %s |", f.label)
		for _, r := range results {
			v, ok := r.values[f.key]
			if !ok {
				v = math.NaN()
			}
			fmt.Fprintf(w, " %s |", formatValue(f.format, v))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%s round %d:\n", r.server, r.round)
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}

// floorTarget is the highest acceptable ratio of a server's selector list
// to its own floor (the same request with no pods to answer for).
const floorTarget = 1.10

// printFloor writes each server's selector list latency over its floor.
func printFloor(w io.Writer, ref, ours []*roundResult) {
	fmt.Fprintf(w, "\n| selector list / floor (same server) | metrics-server | group-metrics-server | target | met |\n")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- |")
	for _, q := range []struct{ label, list, floor string }{
		{"p50", figSelectorP50, figFloorP50},
		{"p99", figSelectorP99, figFloorP99},
	} {
		a := medianOf(ref, q.list) / medianOf(ref, q.floor)
		b := medianOf(ours, q.list) / medianOf(ours, q.floor)
		met := "no"
		if b <= floorTarget {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | <= %.2f | %s |\n", q.label, formatRatio(a), formatRatio(b), floorTarget, met)
	}
}

func medianOf(rs []*roundResult, key string) float64 {
	var v []float64
	for _, r := range rs {
		if x, ok := r.values[key]; ok {
			v = append(v, x)
		}
	}
	return median(v)
}

func formatValue(format string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "none"
	}
	return fmt.Sprintf(format, v)
}

func formatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", r)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// values, or NaN when there are none. values is not modified.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// median returns the middle value of values (the mean of the two middle
// ones for an even count), or NaN when there are none. NaN values are left
// out.
func median(values []float64) float64 {
	s := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
