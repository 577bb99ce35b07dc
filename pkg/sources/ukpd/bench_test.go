package ukpd

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// hugeBody is about size bytes of well-formed series: every instance of
// the cap, then lines repeating them.
func hugeBody(size int) []byte {
	var b bytes.Buffer
	b.Grow(size + 128)
	for i := 0; b.Len() < size; i++ {
		u := strconv.Itoa(i % (2 * maxTextInstances))
		b.WriteString(`instance_cpu_time_s{instance_uuid="` + u + `"} 1.5` + "\n")
		b.WriteString(`instance_rss_bytes{instance_uuid="` + u + `"} 1024` + "\n")
	}
	return b.Bytes()
}

// oneLineBody is a single line of size bytes inside a label value that
// never ends.
func oneLineBody(size int) []byte {
	return append([]byte(`instance_cpu_time_s{instance_uuid="`), bytes.Repeat([]byte("a"), size)...)
}

// benchParse runs parse over body as sub-benchmark name, failing on an
// error when strict.
func benchParse(b *testing.B, name string, body []byte, strict bool, parse func([]byte) error) {
	b.Run(name, func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if err := parse(body); err != nil && strict {
				b.Fatal(err)
			}
		}
	})
}

func decodeText(body []byte) error {
	_, err := DecodeMetricsText(body)
	return err
}

func expfmtParse(body []byte) error {
	p := expfmt.NewTextParser(model.LegacyValidation)
	_, err := p.TextToMetricFamilies(bytes.NewReader(body))
	return err
}

// BenchmarkDecodeMetricsTextHostile measures the decoder on the hostile
// inputs: one 1 MiB line with 100,000 labels, and 64 MiB bodies.
func BenchmarkDecodeMetricsTextHostile(b *testing.B) {
	benchParse(b, "line_100000_labels", fakeukpd.WideLine(100_000), false, decodeText)
	benchParse(b, "body_64MiB_series", hugeBody(64<<20), false, decodeText)
	benchParse(b, "body_64MiB_one_line", oneLineBody(64<<20), false, decodeText)
}

// BenchmarkWideLine compares the decoder with expfmt's parser on lines of
// growing label counts: expfmt checks each label against all before it, so
// its time grows with the square of the count; the decoder stops at
// maxLabelsPerLine. The expfmt runs stop at 8,000 labels: 100,000 would
// take about 150 times the 8,000 figure.
func BenchmarkWideLine(b *testing.B) {
	for _, n := range []int{1000, 2000, 4000, 8000} {
		line := fakeukpd.WideLine(n)
		benchParse(b, "decoder/labels="+strconv.Itoa(n), line, false, decodeText)
		benchParse(b, "expfmt/labels="+strconv.Itoa(n), line, true, expfmtParse)
	}
}

// BenchmarkDecodeMetricsTextTypical is a response of 2,000 instances in
// the documented form, by both parsers.
func BenchmarkDecodeMetricsTextTypical(b *testing.B) {
	var sb strings.Builder
	for _, series := range []string{"instance_state 2", "instance_start_count 1", "instance_started_at 1795942800",
		"instance_uptime_s 12.5", "instance_rss_bytes 52428800", "instance_cpu_time_s 1800.25"} {
		name, value, _ := strings.Cut(series, " ")
		fmt.Fprintf(&sb, "# HELP %s x\n# TYPE %s gauge\n", name, name)
		for i := range 2000 {
			fmt.Fprintf(&sb, "%s{instance_uuid=\"u-%d\"} %s\n", name, i, value)
		}
	}
	body := []byte(sb.String())
	// A body of the documented form with as many lines again of families
	// the source does not read, as a ukpd that grew more series would
	// write: what a line filter could save.
	grown := append(append([]byte{}, body...), "# TYPE instance_wakeup_latency_seconds histogram\n"...)
	for i := range 2000 {
		grown = fmt.Appendf(grown, "instance_wakeup_latency_seconds_bucket{instance_uuid=\"u-%d\",le=\"0.001\"} 0\n", i)
		grown = fmt.Appendf(grown, "instance_wakeup_latency_seconds_bucket{instance_uuid=\"u-%d\",le=\"+Inf\"} 1\n", i)
		grown = fmt.Appendf(grown, "instance_wakeup_latency_seconds_sum{instance_uuid=\"u-%d\"} 0.1\n", i)
		grown = fmt.Appendf(grown, "instance_wakeup_latency_seconds_count{instance_uuid=\"u-%d\"} 1\n", i)
	}
	benchParse(b, "filter_then_expfmt", body, true, filterThenExpfmt)
	benchParse(b, "grown/decoder", grown, true, decodeText)
	benchParse(b, "grown/filter_then_expfmt", grown, true, filterThenExpfmt)
	benchParse(b, "decoder", body, true, decodeText)
	benchParse(b, "expfmt", body, true, expfmtParse)
}

// filterThenExpfmt is the pod-endpoint source's approach
// (pkg/sources/promscrape/parse.go): keep the lines of the series read,
// by name, then parse what is left with expfmt.
func filterThenExpfmt(body []byte) error {
	var kept []byte
	for line := range bytes.Lines(body) {
		name := line
		if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
			name = rest
		} else if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = rest
		}
		if i := bytes.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		if _, ok := seriesIndex[string(name)]; ok {
			kept = append(kept, line...)
		}
	}
	return expfmtParse(kept)
}

// BenchmarkAttributeCutTags attributes n instances whose pod names are
// long enough for kraftlet to cut their tags, in a namespace of n pods:
// the time per instance must stay flat as n grows.
func BenchmarkAttributeCutTags(b *testing.B) {
	for _, n := range []int{500, 2000, 8000} {
		b.Run("instances="+strconv.Itoa(n), func(b *testing.B) {
			suffix := strings.Repeat("p", 244)
			pods := make([]*corev1.Pod, 0, n)
			e := &endpoint{byUUID: map[string]*Instance{}}
			samples := make([]Sample, 0, n)
			for i := range n {
				name := fmt.Sprintf("%08d-%s", i, suffix) // 253 bytes, its tag cut at 256
				pods = append(pods, newPod("ns", name, "kraftlet", "app"))
				uuid := strconv.Itoa(i)
				e.byUUID[uuid] = &Instance{UUID: uuid, Tags: []string{
					TagFor(TagNamespace, "ns"), TagFor(TagPod, name), TagFor(TagContainer, "app"), TagFor(TagNode, "kraftlet"),
				}}
				samples = append(samples, Sample{UUID: uuid, State: stateRunning, StartCount: 1, CPUCoreNanos: 1, RSSBytes: 1})
			}
			e.pods = podLister(b, pods...)
			owned := map[string]struct{}{"kraftlet": {}}
			for b.Loop() {
				batch, _, _, err := e.attribute(context.Background(), samples, t0, owned)
				if err != nil || len(batch.Pods) != n {
					b.Fatalf("attributed %d pods, %v; want %d", len(batch.Pods), err, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/instance")
		})
	}
}
