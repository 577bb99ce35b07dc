package promscrape

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func mustParse(t testing.TB, file string) *Config {
	t.Helper()
	c, errs := Parse([]byte(file))
	if len(errs) > 0 {
		t.Fatalf("Parse: %v", errs)
	}
	return c
}

func checkDiff(t *testing.T, what string, want, got any, opts ...gocmp.Option) {
	t.Helper()
	if diff := gocmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// webTarget is the pod target of ns/web-0.
var webTarget = &Target{ID: "pod/ns/web-0", Kind: KindPod, Pod: &Pod{Namespace: "ns", Name: "web-0", Running: true, IP: "127.0.0.1"}}

// decodeAt decodes body for target (webTarget if nil) at now.
func (c *Config) decodeAt(t *testing.T, body string, target *Target) ([]Sample, error) {
	return c.decode(t.Context(), []byte(body), cmp.Or(target, webTarget), c.allowList(), now)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func checkErrContains(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s error = %v, want one containing %q", what, err, want)
	}
}

func TestDecode(t *testing.T) {
	type got struct {
		Metric                    string
		Namespace, Pod, Container string
		Value                     float64
		Timestamp                 time.Time
	}
	// web0 is a sample of web-0, as webTarget's are.
	web0 := func(metric string, v float64) got { return got{metric, "ns", "web-0", "", v, now} }
	tests := []struct {
		name, config string
		target       *Target // webTarget if nil
		body         string
		want         []got
		partial      string
	}{
		{name: "vllm: allow-listed gauges per engine, current cache name wins over the older one", config: "presets: [vllm]\n",
			body: vllmText([2]float64{3, 4}, [2]float64{1, 2}, 0.5),
			want: []got{web0("vllm-kv-cache-usage", 0.5), web0("vllm-num-requests-running", 1), web0("vllm-num-requests-running", 2),
				web0("vllm-num-requests-waiting", 3), web0("vllm-num-requests-waiting", 4)}},
		// The exposition's timestamp is ignored: the scrape time stands.
		{name: "vllm: an older server with only the deprecated cache name", config: "presets: [vllm]\n",
			body: "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25 1764763200000\n",
			want: []got{{"vllm-kv-cache-usage", "ns", "web-0", "", 0.25, now}}},
		{name: "matchers select a model, untyped accepted, NaN dropped",
			config: `metrics: [{name: q, series: "vllm:num_requests_waiting", type: gauge, combine: sum,
  matchers: [{label: model_name, op: "=~", value: "a|b"}, {label: engine, op: "!=", value: "1"}]}]`,
			body: "vllm:num_requests_waiting{model_name=\"a\",engine=\"0\"} 1\nvllm:num_requests_waiting{model_name=\"c\",engine=\"0\"} 2\n" +
				"vllm:num_requests_waiting{model_name=\"b\",engine=\"1\"} 4\nvllm:num_requests_waiting{model_name=\"b\"} 8\n" +
				"vllm:num_requests_waiting{model_name=\"a\",engine=\"2\"} NaN\n",
			want: []got{web0("q", 1), web0("q", 8)}},
		{name: "dcgm: series attributed by labels, a GPU held by no pod left out",
			config: "presets: [dcgm]\nnodeExporters: [{name: dcgm, selector: app=dcgm, port: 9400, namespaces: [gpu], metrics: [gpu-utilization, gpu-memory-used-mib]}]\n",
			target: &Target{ID: "exporter/dcgm/n1", Kind: KindExporter},
			body:   dcgmText("n1", []dcgmGPU{{0, "ns", "web-0", "vllm", 90, 70000}, {1, "", "", "", 0, 0}, {2, "ns", "web-1", "vllm", 30, 1000}}),
			want: []got{{"gpu-memory-used-mib", "ns", "web-0", "vllm", 70000, now}, {"gpu-memory-used-mib", "ns", "web-1", "vllm", 1000, now},
				{"gpu-utilization", "ns", "web-0", "vllm", 90, now}, {"gpu-utilization", "ns", "web-1", "vllm", 30, now}}},
		{name: "a family of the wrong type is left out and reported",
			config: "metrics: [{name: q, series: queue, type: counter, combine: sum}, {name: r, series: running, type: gauge, combine: sum}]\n",
			body:   "# TYPE queue gauge\nqueue 3\n# TYPE running gauge\nrunning 2\n",
			want:   []got{web0("r", 2)}, partial: "queue is a gauge, configured as counter"},
		{name: "a malformed line in a family not allow-listed does not fail the target", config: "presets: [sglang]\n",
			body: "python_gc{generation=\"0\" 1 garbage\n# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 7\n",
			want: []got{web0("sglang-num-queue-reqs", 7)}},
		{name: "a nameless sample line after an allow-listed series is left out and reported, the series kept whole", config: "presets: [vllm]\n",
			body: "vllm:num_requests_running{A=\"00\"} 1\n{A=\"\"} 2\n",
			want: []got{web0("vllm-num-requests-running", 1)}, partial: "sample lines naming no metric: 1"},
		{name: "a nameless sample line after another family's line is left out unreported", config: "presets: [vllm]\n",
			body: "vllm:num_requests_running{A=\"00\"} 1\n# TYPE other\n{A=\"\"} 2\n",
			want: []got{web0("vllm-num-requests-running", 1)}},
		{name: "a sample line whose first label name is quoted names no metric either", config: "presets: [vllm]\n",
			body: "vllm:num_requests_running{A=\"00\"} 1\n{\"vllm:num_requests_running\"=\"x\"} 2\n",
			want: []got{web0("vllm-num-requests-running", 1)}, partial: "sample lines naming no metric: 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.config)
			if tt.target != nil {
				// The configured exporter, whose metrics it may read.
				tt.target.Exporter = &c.NodeExporters[0]
			}
			samples, err := c.decodeAt(t, tt.body, tt.target)
			if tt.partial == "" {
				must(t, err)
			} else {
				checkErrContains(t, "decode", err, tt.partial)
			}
			var g []got
			for _, s := range samples {
				g = append(g, got{c.Metrics[s.Metric].Name, s.Namespace, s.Pod, s.Container, s.Value, s.Timestamp})
			}
			checkDiff(t, "samples", tt.want, g)
		})
	}
}

// TestDecodeHistogram: a histogram's buckets, _sum and _count are series of
// their own, named by their part and bound, per engine; a family of the
// name typed otherwise, or untyped lines of its parts, are not read as it.
func TestDecodeHistogram(t *testing.T) {
	c := mustParse(t, "metrics: [{name: ttft, series: \"vllm:time_to_first_token_seconds\", type: histogram, quantile: 0.9}]\n")
	body := `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 3
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 4
vllm:time_to_first_token_seconds_sum{engine="0"} 0.5
vllm:time_to_first_token_seconds_count{engine="0"} 4
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 1
vllm:time_to_first_token_seconds_sum{engine="1"} NaN
vllm:time_to_first_token_seconds_count{engine="1"} 1
`
	samples, err := c.decodeAt(t, body, nil)
	must(t, err)
	got := map[string]float64{}
	for _, s := range samples {
		l := sources.SeriesLabels(s.Series)
		got[l["engine"]+" "+l[sources.LabelHistogramPart]+" "+l[sources.LabelLE]] = s.Value
	}
	checkDiff(t, "parts", map[string]float64{
		"0 bucket 0.1": 3, "0 bucket +Inf": 4, "0 sum ": 0.5, "0 count ": 4,
		"1 bucket 0.1": 1, "1 bucket +Inf": 1, "1 count ": 1, // the NaN sum left out
	}, got)
	for _, wrong := range []string{
		"# TYPE vllm:time_to_first_token_seconds gauge\nvllm:time_to_first_token_seconds 1\n",
		"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\nvllm:time_to_first_token_seconds_count 1\n",
	} {
		if samples, _ := c.decodeAt(t, wrong, nil); len(samples) > 0 {
			t.Errorf("decode of %q = %v, want nothing read as the histogram", wrong, samples)
		}
	}
}

// TestDecodeRatio: a ratio's numerator and denominator are counters read as
// a histogram's _sum and _count, per series; a gauge in their place is left
// out and reported, and a denominator alone is read (its numerator may not
// have a series yet: no error counted).
func TestDecodeRatio(t *testing.T) {
	c := mustParse(t, "metrics: [{name: errors-per-request, series: errors_total, denominator: requests_total, type: ratio}]\n")
	read := func(body string) (map[string]float64, error) {
		samples, err := c.decodeAt(t, body, nil)
		got := map[string]float64{}
		for _, s := range samples {
			l := sources.SeriesLabels(s.Series)
			got[l["model"]+" "+l[sources.LabelHistogramPart]] = s.Value
		}
		return got, err
	}
	got, err := read("# TYPE errors counter\nerrors_total{model=\"a\"} 3\n# TYPE requests counter\nrequests_total{model=\"a\"} 40\n" +
		"requests_total{model=\"b\"} 10\n# TYPE other counter\nother_total 1\n")
	must(t, err)
	checkDiff(t, "parts", map[string]float64{"a sum": 3, "a count": 40, "b count": 10}, got)
	got, err = read("# TYPE errors_total gauge\nerrors_total 3\nrequests_total 4\n")
	if err == nil || !strings.Contains(err.Error(), "errors_total is a gauge, configured as ratio (errors-per-request)") {
		t.Errorf("decode error = %v, want the gauge reported", err)
	}
	checkDiff(t, "parts beside a gauge numerator", map[string]float64{" count": 4}, got)
}

func TestDecodeFailsOnBadAllowListedLine(t *testing.T) {
	c := mustParse(t, "presets: [sglang]\n")
	tests := []struct{ name, body, want string }{
		{"broken", "sglang:num_queue_reqs{model_name=\"m\" 7\n", "unexpected end of label value"},
		{"too long", "sglang:num_queue_reqs{" + strings.Repeat(`a="",`, 2000) + "} 1\n", "longer than 8192 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.decodeAt(t, tt.body, nil)
			checkErrContains(t, "decode", err, tt.want)
		})
	}
	// A long line of another family is skipped, not read.
	body := "other{" + strings.Repeat(`a="",`, 20000) + "} 1\nsglang:num_queue_reqs 2\n"
	if s, err := c.decodeAt(t, body, nil); err != nil || len(s) != 1 {
		t.Fatalf("decode = %v, %v; want the one sglang sample", s, err)
	}
}

// FuzzFilterMatchesFullParse checks the line filter against expfmt on the
// whole body less its nameless sample lines (expfmt would add their labels
// to the series before them): whenever that parses, the filtered body parses
// too and yields exactly the allow-listed families of that parse.
func FuzzFilterMatchesFullParse(f *testing.F) {
	f.Add([]byte(vllmText([2]float64{1, 2}, [2]float64{3, 4}, 0.5)))
	f.Add([]byte(dcgmText("n", []dcgmGPU{{0, "ns", "p", "c", 50, 10}})))
	f.Add([]byte("# HELP vllm:num_requests_waiting x\n  vllm:num_requests_waiting 1\n\n# comment\nother 2\n"))
	f.Add([]byte("{\"vllm:num_requests_waiting\",a=\"b\"} 1\n"))
	f.Add([]byte("vllm:num_requests_waiting\t1 123\r\n"))
	f.Add([]byte("vllm:num_requests_running{A=\"00\"} 0\n# TYPE other\n{A=\"\"} 0\n"))
	c := mustParse(f, "presets: [vllm, sglang, dcgm]\n")
	allow := c.allowList()
	f.Fuzz(func(t *testing.T, body []byte) {
		full, err := fullParse(withoutNameless(body))
		if err != nil {
			// The whole body does not parse (or the parser panics on it):
			// the filtered parse may still succeed, but must not panic.
			_, _, _ = parseFamilies(t.Context(), body, allow, noLineLimits)
			return
		}
		for name := range full {
			if _, ok := allow[name]; !ok {
				delete(full, name)
			}
		}
		got, _, err := parseFamilies(t.Context(), body, allow, noLineLimits)
		if err != nil {
			t.Fatalf("full body parses, filtered body does not: %v", err)
		}
		if diff := gocmp.Diff(renderFamilies(t, full), renderFamilies(t, got)); diff != "" {
			t.Fatalf("filtered parse differs (-full +filtered):\n%s", diff)
		}
	})
}

// FuzzDecode feeds arbitrary bodies through the decoder of both target
// kinds: it must never panic, and every sample it returns is finite and
// attributed.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(vllmText([2]float64{1, 2}, [2]float64{3, 4}, 0.5)))
	f.Add([]byte(dcgmText("n", []dcgmGPU{{0, "ns", "p", "c", 50, 10}})))
	c := mustParse(f, "presets: [vllm, sglang, dcgm]\nnodeExporters: [{name: dcgm, selector: app=dcgm, port: 9400, namespaces: [gpu], metrics: [gpu-utilization, gpu-memory-used-mib]}]\n")
	allow := c.allowList()
	targets := []*Target{
		{Pod: &Pod{Namespace: "ns", Name: "p"}, Kind: KindPod},
		{Exporter: &c.NodeExporters[0], Kind: KindExporter},
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tg := range targets {
			samples, _ := c.decode(t.Context(), body, tg, allow, now)
			for _, s := range samples {
				if s.Namespace == "" || s.Pod == "" || s.Metric < 0 || s.Metric >= len(c.Metrics) {
					t.Fatalf("unattributed sample %+v", s)
				}
				if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
					t.Fatalf("sample %+v is not finite", s)
				}
			}
		}
	})
}

// renderFamilies writes families in name order in the text format, so two
// parses compare as text.
func renderFamilies(t *testing.T, fams map[string]*dto.MetricFamily) string {
	var b bytes.Buffer
	for _, n := range slices.Sorted(maps.Keys(fams)) {
		if _, err := expfmt.MetricFamilyToText(&b, fams[n]); err != nil {
			t.Fatalf("render %s: %v", n, err)
		}
	}
	return b.String()
}

// withoutNameless drops the sample lines that open with labels and no
// quoted metric name ({a="b"}, {"a"="b"}).
func withoutNameless(body []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(body, []byte("\n")) {
		s := bytes.TrimLeft(line, " \t")
		if len(s) > 0 && s[0] == '{' {
			r := bytes.TrimLeft(s[1:], " \t")
			end := bytes.IndexByte(r[min(1, len(r)):], '"')
			if len(r) == 0 || r[0] != '"' || end < 0 {
				continue
			}
			if after := bytes.TrimLeft(r[2+end:], " \t"); !bytes.Contains(r[1:1+end], []byte(`\`)) && len(after) > 0 && after[0] == '=' {
				continue // a quoted label name, no metric name
			}
		}
		out = append(out, line...)
	}
	return out
}

func fullParse(body []byte) (fams map[string]*dto.MetricFamily, err error) {
	defer func() {
		if r := recover(); r != nil {
			fams, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

// noLineLimits holds lines to nothing a line of at most maxLineBytes could
// pass, so the filter is compared with a parse of the whole body alone.
var noLineLimits = lineLimits{labels: maxLineBytes, labelBytes: maxLineBytes, series: math.MaxInt}
