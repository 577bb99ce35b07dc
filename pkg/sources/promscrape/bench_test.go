package promscrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

const (
	benchPods    = 1000
	benchAllowed = 20
	benchOther   = 500
)

func benchBodies(n int) [][]byte {
	rng := rand.New(rand.NewSource(1))
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = []byte(benchText(rng, benchAllowed, benchOther))
	}
	return bodies
}

// BenchmarkParseOneTarget compares three ways to read the allow-listed
// families of one target (20 allow-listed series among ~500 others):
// expfmt's TextParser on the whole body, expfmt's streaming Decoder on the
// whole body (keeping allow-listed families as they come), and the line
// filter followed by the TextParser on what it kept.
func BenchmarkParseOneTarget(b *testing.B) {
	body := benchBodies(1)[0]
	allow := benchConfig(benchAllowed).allowList()
	// run benchmarks parse, which returns how many families it kept.
	run := func(name string, parse func() (int, error)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if kept, err := parse(); err != nil || kept != benchAllowed {
					b.Fatalf("kept %d families: %v", kept, err)
				}
			}
		})
	}
	run("TextParser", func() (int, error) {
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
		kept := 0
		for name := range fams {
			if _, ok := allow[name]; ok {
				kept++
			}
		}
		return kept, err
	})
	run("Decoder", func() (int, error) {
		dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.NewFormat(expfmt.TypeTextPlain))
		for kept := 0; ; {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); errors.Is(err, io.EOF) {
				return kept, nil
			} else if err != nil {
				return kept, err
			}
			if _, ok := allow[mf.GetName()]; ok {
				kept++
			}
		}
	})
	run("FilterThenTextParser", func() (int, error) {
		fams, _, err := parseFamilies(context.Background(), body, allow, noLineLimits)
		return len(fams), err
	})
}

// BenchmarkCycle is one tick's work after the bodies arrived, at 1,000 pods
// × 20 allow-listed series among ~500 others each: decode every target,
// hand its series to the store (which derives the rates), read a pod back.
func BenchmarkCycle(b *testing.B) {
	bodies := benchBodies(benchPods)
	cfg := benchConfig(benchAllowed)
	allow := cfg.allowList()
	src := NewSource(cfg, nil, Options{})
	targets := make([]target, benchPods)
	for i := range targets {
		name := "pod-" + strconv.Itoa(i)
		targets[i] = target{src: src, Target: Target{ID: "pod/ns/" + name, Kind: KindPod, Pod: &Pod{Namespace: "ns", Name: name}}}
	}
	st := store.New(store.Config{Clock: clocktesting.NewFakeClock(now), Sources: []string{SourceName}, StaleAfter: time.Hour})
	b.ReportAllocs()
	for b.Loop() {
		for i := range targets {
			s, err := cfg.decode(context.Background(), bodies[i], &targets[i].Target, allow, now)
			if err != nil {
				b.Fatal(err)
			}
			st.StoreSeries(SourceName, targets[i].Target.ID, targets[i].series(s), now)
		}
		if got := st.Series("ns", "pod-0", "", cfg.Metrics[0].Name); len(got) == 0 {
			b.Fatalf("pod-0 has no %s", cfg.Metrics[0].Name)
		}
	}
}

// BenchmarkDecodeWorstCase decodes the most a target may send, at 1, 2 and
// 4 MiB, so time and allocation can be read as linear in bytes: "wide" is
// 8 KiB lines of one allow-listed family, each with the 64 labels the
// default limit lets a line carry (their values long enough to fill the
// line); "many" is short lines of one label, about 100,000 series in 4 MiB.
// The limits that would refuse such bodies before the parser (series per
// target, label bytes) are raised to their maximums, so the parser's own
// cost is what is measured.
func BenchmarkDecodeWorstCase(b *testing.B) {
	cfg := mustParse(b, "metrics: [{name: q, series: q, type: gauge, combine: sum}]\n"+
		"limits: {labelsPerSeries: 64, labelBytesPerSeries: 8192, seriesPerTarget: 1000000}\n")
	allow := cfg.allowList()
	target := &Target{ID: "pod/ns/p", Kind: KindPod, Pod: &Pod{Namespace: "ns", Name: "p"}}
	wide := func(i int) string {
		var line strings.Builder
		fmt.Fprintf(&line, "q{")
		// 64 labels of 120-byte values: about 8,000 bytes a line.
		for l := range 64 {
			fmt.Fprintf(&line, "l%02d=\"%07d%s\",", l, i, strings.Repeat("v", 113))
		}
		line.WriteString("} 1\n")
		return line.String()
	}
	// 40 bytes a line: 104,857 series in 4 MiB.
	many := func(i int) string { return fmt.Sprintf("q{s=\"%030d\"} 1\n", i) }
	for _, shape := range []struct {
		name string
		line func(int) string
	}{{"wide", wide}, {"many", many}} {
		for _, mib := range []int{1, 2, 4} {
			var body bytes.Buffer
			body.WriteString("# TYPE q gauge\n")
			for i := 0; ; i++ {
				l := shape.line(i)
				if body.Len()+len(l) > mib<<20 {
					break
				}
				body.WriteString(l)
			}
			series := bytes.Count(body.Bytes(), []byte("\n")) - 1
			b.Run(fmt.Sprintf("%s/%dMiB", shape.name, mib), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(body.Len()))
				for b.Loop() {
					s, err := cfg.decode(context.Background(), body.Bytes(), target, allow, now)
					if err != nil || len(s) != series {
						b.Fatalf("decode = %d samples, %v; want %d", len(s), err, series)
					}
				}
				b.ReportMetric(float64(series), "series")
			})
		}
	}
}
