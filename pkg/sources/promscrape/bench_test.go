package promscrape

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
// derive rates, collate per pod.
func BenchmarkCycle(b *testing.B) {
	bodies := benchBodies(benchPods)
	cfg := benchConfig(benchAllowed)
	allow := cfg.allowList()
	targets := make([]Target, benchPods)
	for i := range targets {
		name := "pod-" + strconv.Itoa(i)
		targets[i] = Target{ID: "pod/ns/" + name, Kind: KindPod, Pod: &Pod{Namespace: "ns", Name: name}}
	}
	rates := NewRates()
	b.ReportAllocs()
	for b.Loop() {
		var all []Sample
		for i := range targets {
			s, err := cfg.decode(context.Background(), bodies[i], &targets[i], allow, now)
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, rates.Apply(targets[i].ID, cfg.Metrics, s)...)
		}
		rates.Sweep()
		batch := Collate(cfg.Metrics, all)
		if len(batch.Pods) != benchPods || len(batch.Pods[0].Values) != benchAllowed {
			b.Fatalf("batch has %d pods", len(batch.Pods))
		}
	}
}
