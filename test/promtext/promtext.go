// Package promtext reads the Prometheus text exposition for the tests and
// the benchmark harness with prometheus/common's parser (expfmt), the parser
// metrics-server and Prometheus use, so no test reads /metrics by hand.
package promtext

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families parses a text exposition. With names given, only the lines of
// those families (their samples, with a histogram's or summary's _bucket,
// _sum and _count, and their # HELP and # TYPE lines) reach the parser, so
// a server's thousands of per-node series cost nothing; the filter reads a
// line's name up to the first '{' or space, which is all it needs for the
// servers measured here.
func Families(body string, names ...string) (map[string]*dto.MetricFamily, error) {
	text := body
	if len(names) > 0 {
		keep := map[string]bool{}
		for _, n := range names {
			for _, s := range []string{"", "_bucket", "_sum", "_count"} {
				keep[n+s] = true
			}
		}
		var b strings.Builder
		sc := bufio.NewScanner(strings.NewReader(body))
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			if keep[lineName(sc.Bytes())] {
				b.Write(sc.Bytes())
				b.WriteByte('\n')
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read exposition: %w", err)
		}
		text = b.String()
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse exposition: %w", err)
	}
	return fams, nil
}

// lineName is the metric name a line is about: a sample's name, or the
// family of a # HELP or # TYPE line; "" for any other line.
func lineName(line []byte) string {
	if rest, ok := bytes.CutPrefix(line, []byte("# ")); ok {
		f := bytes.Fields(rest)
		if len(f) >= 2 && (string(f[0]) == "HELP" || string(f[0]) == "TYPE") {
			return string(f[1])
		}
		return ""
	}
	if i := bytes.IndexAny(line, "{ \t"); i >= 0 {
		return string(line[:i])
	}
	return string(line)
}

// Sum adds the samples of name whose labels include every pair of want,
// and reports whether there was any. A histogram's or summary's _sum and
// _count are samples of their own names, as the text writes them.
func Sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	family, part := name, ""
	if _, ok := fams[name]; !ok {
		for _, suffix := range []string{"_sum", "_count"} {
			if base, cut := strings.CutSuffix(name, suffix); cut {
				family, part = base, suffix
			}
		}
	}
	f, ok := fams[family]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
	for _, m := range f.GetMetric() {
		if v, ok := value(m, part); ok && hasLabels(m, want) {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// value is a sample's value: part "" for a counter, gauge or untyped
// metric, "_sum" or "_count" for a histogram or summary.
func value(m *dto.Metric, part string) (float64, bool) {
	h, s := m.GetHistogram(), m.GetSummary()
	switch {
	case part == "_sum" && h != nil:
		return h.GetSampleSum(), true
	case part == "_count" && h != nil:
		return float64(h.GetSampleCount()), true
	case part == "_sum" && s != nil:
		return s.GetSampleSum(), true
	case part == "_count" && s != nil:
		return float64(s.GetSampleCount()), true
	case part != "" || h != nil || s != nil:
		return 0, false
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	default:
		return m.GetUntyped().GetValue(), true
	}
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Value sums the samples of name in body whose labels include every one of
// labels (matchers written as in PromQL, `key="value"`), and reports whether
// there was any.
func Value(body, name string, labels ...string) (float64, bool, error) {
	want := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		unquoted, err := strconv.Unquote(v)
		if !ok || err != nil {
			return 0, false, fmt.Errorf("label matcher %q is not key=\"value\"", l)
		}
		want[k] = unquoted
	}
	fams, err := Families(body)
	if err != nil {
		return 0, false, err
	}
	v, ok := Sum(fams, name, want)
	return v, ok, nil
}
