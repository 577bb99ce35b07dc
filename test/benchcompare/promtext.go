package main

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// samples are the families of a server's /metrics that a round reads.
type samples map[string]*dto.MetricFamily

// parseSamples parses a text exposition, keeping only the families named
// (so that thousands of per-node series cost nothing).
func parseSamples(text string, families ...string) (samples, error) {
	return promtext.Families(text, families...)
}

// histogram returns the _sum and _count of the unlabelled histogram name.
func (s samples) histogram(name string) (sum, count float64, ok bool) {
	sum, okSum := promtext.Sum(s, name+"_sum", nil)
	count, okCount := promtext.Sum(s, name+"_count", nil)
	return sum, count, okSum && okCount
}

// total adds every series of name whose labels include those of match.
func (s samples) total(name string, match map[string]string) float64 {
	v, _ := promtext.Sum(s, name, match)
	return v
}
