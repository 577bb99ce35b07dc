package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// samples are the values of a Prometheus text exposition, keyed by the metric
// name and its labels exactly as written, e.g. `x_count` or `x{a="b"}`.
type samples map[string]float64

// parseSamples reads the text exposition format, keeping only series whose
// name has one of the given prefixes (so that thousands of per-node series
// cost no memory).
func parseSamples(text string, prefixes ...string) (samples, error) {
	out := samples{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !hasAnyPrefix(line, prefixes) {
			continue
		}
		// The value follows the last space outside the labels; a timestamp
		// is never written by the servers measured here.
		end := strings.LastIndexByte(line, '}')
		sp := strings.IndexByte(line[end+1:], ' ')
		if sp < 0 {
			return nil, fmt.Errorf("malformed sample %q", line)
		}
		key := line[:end+1+sp]
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1+sp:]), 64)
		if err != nil {
			return nil, fmt.Errorf("sample %q: %w", line, err)
		}
		out[key] = v
	}
	return out, sc.Err()
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// histogram returns the _sum and _count of the unlabelled histogram name.
func (s samples) histogram(name string) (sum, count float64, ok bool) {
	sum, okSum := s[name+"_sum"]
	count, okCount := s[name+"_count"]
	return sum, count, okSum && okCount
}

// total adds every series of name whose labels contain each of the
// label="value" pairs in match.
func (s samples) total(name string, match ...string) float64 {
	var t float64
	for k, v := range s {
		labels, ok := strings.CutPrefix(k, name)
		if !ok || (labels != "" && labels[0] != '{') {
			continue
		}
		all := true
		for _, m := range match {
			if !strings.Contains(labels, m) {
				all = false
				break
			}
		}
		if all {
			t += v
		}
	}
	return t
}
