package ukpd

import (
	"bytes"
	"maps"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

const validText = `# HELP instance_state 0=stopped,1=starting,2=running,3=draining,4=stopping,5=standby,6=template,7=deleted
# TYPE instance_state gauge
instance_state{instance_uuid="u-run"} 2
instance_state{instance_uuid="u-standby"} 5

# HELP instance_start_count Number of times the instance has been started
# TYPE instance_start_count counter
instance_start_count{instance_uuid="u-run"} 3
instance_start_count{instance_uuid="u-standby"} 2

# HELP instance_started_at Time when the instance started
# TYPE instance_started_at gauge
instance_started_at{instance_uuid="u-run"} 1795942800
instance_started_at{instance_uuid="u-standby"} 0

# HELP instance_rss_bytes Resident set size in bytes
# TYPE instance_rss_bytes gauge
instance_rss_bytes{instance_uuid="u-run"} 52428800
instance_rss_bytes{instance_uuid="u-standby"} 0

# HELP instance_cpu_time_s Consumed CPU time in seconds
# TYPE instance_cpu_time_s counter
instance_cpu_time_s{instance_uuid="u-run"} 1800.250000
instance_cpu_time_s{instance_uuid="u-standby"} 0.150000

# HELP instance_wakeup_latency_seconds Wakeup latencies in seconds
# TYPE instance_wakeup_latency_seconds histogram
instance_wakeup_latency_seconds_bucket{instance_uuid="u-standby",le="0.001000"} 0
instance_wakeup_latency_seconds_bucket{instance_uuid="u-standby",le="+Inf"} 1
instance_wakeup_latency_seconds_sum{instance_uuid="u-standby"} 0.104000
instance_wakeup_latency_seconds_count{instance_uuid="u-standby"} 1
`

func TestDecodeMetricsText(t *testing.T) {
	runDecodeCases(t, DecodeMetricsText, []decodeCase[Sample]{
		{
			name: "documented series",
			body: validText,
			want: []Sample{
				{UUID: "u-run", State: "running", CPUCoreNanos: 1800250000000, RSSBytes: 52428800, StartCount: 3, StartedAt: time.Unix(1795942800, 0).UTC()},
				{UUID: "u-standby", State: "standby", CPUCoreNanos: 150000000, StartCount: 2},
			},
		},
		{name: "empty body", body: "", want: []Sample{}},
		{name: "only comments", body: "# HELP x y\n# TYPE x gauge\n\n", want: []Sample{}},
		{
			name: "labels, escapes, timestamps and CRLF",
			body: "instance_cpu_time_s { other=\"a \\\"b\\\"\\n\\\\\" , instance_uuid=\"u1\", } 2.5 1700000000000\r\n" +
				"instance_rss_bytes{instance_uuid=\"u1\"} 1e3\r\n" +
				"instance_state{instance_uuid=\"u1\"} 9\r\n",
			want: []Sample{{UUID: "u1", State: "code-9", CPUCoreNanos: 2500000000, RSSBytes: 1000}},
		},
		{
			name: "series without a uuid, repeats and bad values cost only their instance",
			body: `instance_cpu_time_s 1
instance_cpu_time_s{instance_uuid="ok"} 1
instance_rss_bytes{instance_uuid="ok"} 1
instance_rss_bytes{instance_uuid="ok"} 2
instance_cpu_time_s{instance_uuid="no-rss"} 1
instance_cpu_time_s{instance_uuid="neg"} -1
instance_rss_bytes{instance_uuid="neg"} 1
instance_cpu_time_s{instance_uuid="nan"} NaN
instance_rss_bytes{instance_uuid="nan"} 1
instance_cpu_time_s{instance_uuid="inf"} 1
instance_rss_bytes{instance_uuid="inf"} +Inf
instance_cpu_time_s{instance_uuid="frac-count"} 1
instance_rss_bytes{instance_uuid="frac-count"} 1
instance_start_count{instance_uuid="frac-count"} 1.5
instance_cpu_time_s{instance_uuid="old"} 1
instance_rss_bytes{instance_uuid="old"} 1
instance_started_at{instance_uuid="old"} 12
instance_cpu_time_s{instance_uuid="state"} 1
instance_rss_bytes{instance_uuid="state"} 1
instance_state{instance_uuid="state"} -1
`,
			want:    []Sample{{UUID: "ok", CPUCoreNanos: 1e9, RSSBytes: 1}},
			wantErr: "left out 9 entries",
		},
		{
			name:    "malformed lines cost only themselves",
			body:    "instance_cpu_time_s{instance_uuid=\"a\"} 1\ninstance_rss_bytes{instance_uuid=\"a\"} 1\ninstance_rss_bytes{instance_uuid=\"b} 1\n{} 1\nx{a=b} 1\nx{a=\"b\" c=\"d\"} 1\nx{a=\"b\",a=\"c\"} 1\nx{a=\"\\q\"} 1\nx 1 2 3\nx one\nx 1 soon\nx\n",
			want:    []Sample{{UUID: "a", CPUCoreNanos: 1e9, RSSBytes: 1}},
			wantErr: "left out 10 entries",
		},
	})
}

func TestDecodeMetricsTextRejects(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{name: "binary", body: "\x00\xff\xfe garbage"},
		{name: "JSON", body: `{"status": "success", "data": {"instances": []}}`},
		{name: "HTML error page", body: "<html><body>502 Bad Gateway</body></html>"},
		{name: "broken after a valid comment", body: "# TYPE instance_cpu_time_s counter\ninstance_cpu_time_s{instance_uuid= 1.2.3 oops\n\x00\xff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeMetricsText([]byte(tc.body))
			checkRejected(t, got, err, "no well-formed sample", sources.ReasonDecode)
		})
	}
}

func TestDecodeMetricsTextNamesLines(t *testing.T) {
	_, err := DecodeMetricsText([]byte("instance_rss_bytes{instance_uuid=\"a\"} 1\ninstance_cpu_time_s{instance_uuid=\"a\"} many\n"))
	checkErr(t, err, `line 2: instance_cpu_time_s: value "many" is not a number`, sources.ReasonDecode)
}

// addTextSeeds seeds the fuzz tests of the text decoder.
func addTextSeeds(f *testing.F) {
	for _, seed := range []string{
		validText,
		"instance_cpu_time_s{instance_uuid=\"a\"} 1\ninstance_rss_bytes{instance_uuid=\"a\"} 1\n",
		"x{a=\"\\\\\\\"\\n\"} 1 2\n",
		"instance_started_at{instance_uuid=\"a\"} 1e300\n",
		"instance_cpu_time_s{instance_uuid=\"a\",x=\"\\\\\\\"\\n\"} 1 1700000000000\ninstance_rss_bytes{instance_uuid=\"a\"} 2e3\n",
		"instance_uptime_s{instance_uuid=\"a\"} 1.5\ninstance_state{instance_uuid=\"a\"} 5\n",
	} {
		f.Add([]byte(seed))
	}
}

// FuzzDecodeMetricsText checks that no input crashes the decoder and that
// whatever it accepts obeys the bounds the source relies on.
func FuzzDecodeMetricsText(f *testing.F) {
	addTextSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		samples, err := DecodeMetricsText(body)
		if rejected(t, samples, err) {
			return
		}
		checkSamples(t, samples)
		for _, s := range samples {
			if s.UUID == "" || s.Name != "" {
				t.Fatalf("accepted sample %+v without a uuid", s)
			}
		}
	})
}

// FuzzDecodeMetricsTextMatchesExpfmt checks the decoder against the
// Prometheus library's parser: on every body the library accepts, and
// that holds no line the decoder refuses by its own bounds, both read the
// same samples.
func FuzzDecodeMetricsTextMatchesExpfmt(f *testing.F) {
	addTextSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		want, ok := expfmtSamples(body)
		if !ok {
			return
		}
		got, _ := DecodeMetricsText(body)
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decoder and expfmt differ on %q (-expfmt +decoder):\n%s", body, diff)
		}
	})
}

// expfmtSamples reads the samples of body with the Prometheus library and
// the decoder's own rules for what a sample needs. ok is false when the
// library refuses the body, or when the body has what the decoder refuses
// by its own choice: lines longer than maxLineBytes, NUL bytes, invalid
// UTF-8 even in comments, more than maxLabelsPerLine labels, or one of the
// series read declared as a histogram or summary. Also left aside are
// lines that start with a brace: the library reads "{}1" as a new value of
// the metric on the line before, the decoder as a sample without a name.
func expfmtSamples(body []byte) ([]Sample, bool) {
	if bytes.IndexByte(body, 0) >= 0 || !utf8.Valid(body) || bytes.Contains(body, []byte{'\r'}) {
		return nil, false
	}
	for line := range bytes.Lines(body) {
		if len(line) > maxLineBytes || bytes.HasPrefix(bytes.TrimLeft(line, " \t"), []byte("{")) {
			return nil, false
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	byUUID := map[string]*series{}
	for name, idx := range seriesIndex {
		mf := families[name]
		if mf == nil {
			continue
		}
		if ty := mf.GetType(); ty != dto.MetricType_COUNTER && ty != dto.MetricType_GAUGE && ty != dto.MetricType_UNTYPED {
			return nil, false
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > maxLabelsPerLine {
				return nil, false
			}
			var uuid string
			for _, l := range m.GetLabel() {
				if l.GetName() == labelUUID {
					uuid = l.GetValue()
				}
			}
			if uuid == "" {
				continue
			}
			s := byUUID[uuid]
			if s == nil {
				s = &series{}
				byUUID[uuid] = s
			}
			if s.have[idx] {
				continue // the first one counts
			}
			v := m.GetUntyped().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			} else if m.Gauge != nil {
				v = m.GetGauge().GetValue()
			}
			s.values[idx], s.have[idx] = v, true
		}
	}
	var out []Sample
	for _, u := range slices.Sorted(maps.Keys(byUUID)) {
		if s, err := byUUID[u].sample(u); err == nil {
			out = append(out, s)
		}
	}
	return out, true
}
