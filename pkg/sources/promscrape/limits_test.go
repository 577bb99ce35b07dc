package promscrape

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

func TestLimitsDefaultsAndFile(t *testing.T) {
	tests := []struct {
		name, file string
		want       Limits
	}{
		{"defaults", "presets: [vllm]\n", Limits{LabelsPerSeries: 64, LabelBytesPerSeries: 2048, SeriesPerTarget: 10_000, PointsPerCollection: 200_000}},
		{"from the file, the rest defaulted", "presets: [vllm]\nlimits: {labelsPerSeries: 16, pointsPerCollection: 500}\n",
			Limits{LabelsPerSeries: 16, LabelBytesPerSeries: 2048, SeriesPerTarget: 10_000, PointsPerCollection: 500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDiff(t, "limits", tt.want, mustParse(t, tt.file).Limits)
		})
	}
}

func TestMetricBounds(t *testing.T) {
	tests := []struct {
		name     string
		min, max *float64
		in, out  []float64
		wantErrs []string
	}{
		{name: "no bounds take anything", in: []float64{-1e300, 0, 1e300}},
		{name: "min only", min: f(0), in: []float64{0, 5}, out: []float64{-0.001, -5}},
		{name: "min and max, both inclusive", min: f(0), max: f(100), in: []float64{0, 50, 100}, out: []float64{-1, 100.5}},
		{name: "min above max", min: f(2), max: f(1), wantErrs: []string{"m: min 2 is above max 1"}},
		{name: "not finite", min: f(math.Inf(-1)), max: f(math.NaN()), wantErrs: []string{"m.min: -Inf must be finite", "m.max: NaN must be finite"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Metric{Name: "q", Series: "q", Type: Gauge, Combine: CombineSum, Min: tt.min, Max: tt.max}
			checkDiff(t, "errors", tt.wantErrs, errStrings(m.validate("m")))
			for _, v := range tt.in {
				if !m.inRange(v) {
					t.Errorf("%v out of range, want in", v)
				}
			}
			for _, v := range tt.out {
				if m.inRange(v) {
					t.Errorf("%v in range, want out", v)
				}
			}
		})
	}
}

func TestCountLabels(t *testing.T) {
	tests := []struct {
		name, line        string
		labels, labelLine int
	}{
		{"no labels", "q 1\n", 0, 0},
		{"two labels", `q{a="1",b="2"} 1`, 2, len(`a="1",b="2"`)},
		{"blanks before the braces", "q \t{a=\"1\",b=\"2\"} 1", 2, len(`a="1",b="2"`)},
		{"= and } inside a value are not labels", `q{a="x=y}z",b="2"} 1`, 2, len(`a="x=y}z",b="2"`)},
		{"an escaped quote does not end a value", `q{a="x\"=,b=\"",b="2"} 1`, 2, len(`a="x\"=,b=\"",b="2"`)},
		{"quoted metric name", `{"q.x",a="1"} 1`, 1, len(`"q.x",a="1"`)},
		{"quoted label names", `{"q.x","a.b"="1","c"="2"} 1`, 2, len(`"q.x","a.b"="1","c"="2"`)},
		{"unclosed braces count to the end", `q{a="1",b="2"`, 2, len(`a="1",b="2"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, b := countLabels([]byte(tt.line))
			if n != tt.labels || b != tt.labelLine {
				t.Errorf("countLabels = %d labels, %d bytes; want %d, %d", n, b, tt.labels, tt.labelLine)
			}
		})
	}
}

// seriesLine is an sglang:num_queue_reqs line with n labels.
func seriesLine(n int) string {
	labels := make([]string, n)
	for i := range labels {
		labels[i] = fmt.Sprintf("l%d=\"v\"", i)
	}
	return "sglang:num_queue_reqs{" + strings.Join(labels, ",") + "} 1\n"
}

// TestDecodeLimits: a target past a limit fails as too_large before the
// parser reads its lines; lines of other families and comments do not count.
func TestDecodeLimits(t *testing.T) {
	tests := []struct {
		name, limits, body string
		wantSamples        int
		wantErr            string // "" for success; the reason is then too_large
	}{
		{name: "64 labels pass", body: seriesLine(64), wantSamples: 1},
		{name: "65 labels fail", body: seriesLine(65), wantErr: "more than 64 labels"},
		{name: "65 labels after blanks fail too", body: strings.Replace(seriesLine(65), "{", " \t{", 1), wantErr: "more than 64 labels"},
		{name: "a tighter label limit", limits: "labelsPerSeries: 2", body: seriesLine(3), wantErr: "more than 2 labels"},
		{name: "a family not allow-listed is not held to the label limit", body: strings.Replace(seriesLine(200), "sglang:num_queue_reqs", "other", 1) + seriesLine(1), wantSamples: 1},
		{name: "label bytes", body: "sglang:num_queue_reqs{a=\"" + strings.Repeat("x", 2100) + "\"} 1\n", wantErr: "labels take more than 2048 bytes"},
		{name: "label bytes from the file", limits: "labelBytesPerSeries: 10", body: "sglang:num_queue_reqs{a=\"0123456789\"} 1\n", wantErr: "more than 10 bytes"},
		{name: "series per target", limits: "seriesPerTarget: 3",
			body: "# HELP sglang:num_queue_reqs q\n# TYPE sglang:num_queue_reqs gauge\n" + strings.Repeat(seriesLine(1), 4), wantErr: "more than 3 series"},
		{name: "series at the limit, other families and comments not counted", limits: "seriesPerTarget: 3",
			body: "# HELP sglang:num_queue_reqs q\n# TYPE sglang:num_queue_reqs gauge\n" + strings.Repeat("other 1\n# c\n", 100) +
				strings.Replace(seriesLine(1), "l0", "a", 1) + strings.Replace(seriesLine(1), "l0", "b", 1) + strings.Replace(seriesLine(1), "l0", "c", 1),
			wantSamples: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := "presets: [sglang]\n"
			if tt.limits != "" {
				file += "limits: {" + tt.limits + "}\n"
			}
			c := mustParse(t, file)
			samples, err := c.decodeAt(t, tt.body, nil)
			if tt.wantErr == "" {
				if err != nil || len(samples) != tt.wantSamples {
					t.Fatalf("decode = %d samples, %v; want %d, no error", len(samples), err, tt.wantSamples)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || sources.Reason(err) != sources.ReasonTooLarge {
				t.Fatalf("decode error = %v (reason %s), want a too_large one containing %q", err, sources.Reason(err), tt.wantErr)
			}
		})
	}
}

// TestDecodeHonoursContext: a decode whose context is done stops with a
// timeout, whether it is filtering lines or reading families.
func TestDecodeHonoursContext(t *testing.T) {
	c := mustParse(t, "presets: [sglang, vllm]\n")
	tests := []struct{ name, body string }{
		{"many lines", strings.Repeat("other 1\n", 5000) + seriesLine(1)},
		{"one line", seriesLine(1)},
		{"several families", vllmText([2]float64{1, 2}, [2]float64{3, 4}, 0.5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			samples, err := c.decode(ctx, []byte(tt.body), webTarget, c.allowList(), now)
			if err == nil || sources.Reason(err) != sources.ReasonTimeout || len(samples) != 0 {
				t.Fatalf("decode = %d samples, %v (reason %s); want a timeout", len(samples), err, sources.Reason(err))
			}
			// The same body decodes under a live context.
			if _, err := c.decodeAt(t, tt.body, nil); err != nil {
				t.Fatalf("decode under a live context: %v", err)
			}
		})
	}
}

// FuzzCountLabelsNeverUndercounts holds the pre-parse count to expfmt's
// reading: for every one-line body the parser reads, countLabels counts at
// least the labels it finds, and at least the bytes of their names and
// values, so no line passes the limits with more than they allow.
func FuzzCountLabelsNeverUndercounts(f *testing.F) {
	f.Add([]byte(`q{a="1",b="2"} 1`))
	f.Add([]byte("q \t{a=\"x=y}z\",b=\"\\\"\"} 1"))
	f.Add([]byte(`{"q.x","a.b"="1",c="2"} 1`))
	f.Add([]byte(`q{a="\n\\"} 1 123`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.ContainsAny(line, "\n") {
			return
		}
		fams, err := fullParse(append(bytes.Clone(line), '\n'))
		if err != nil {
			return
		}
		labels, labelBytes := countLabels(bytes.TrimLeft(line, " \t"))
		for _, fam := range fams {
			for _, pm := range fam.Metric {
				n := 0
				for _, l := range pm.Label {
					n += len(l.GetName()) + len(l.GetValue())
				}
				if len(pm.Label) > labels || n > labelBytes {
					t.Fatalf("%q: expfmt reads %d labels of %d bytes, countLabels %d labels, %d bytes", line, len(pm.Label), n, labels, labelBytes)
				}
			}
		}
	})
}
