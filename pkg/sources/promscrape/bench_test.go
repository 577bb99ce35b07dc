package promscrape

import (
	"bytes"
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
	b.Run("TextParser", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			p := expfmt.NewTextParser(model.LegacyValidation)
			fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			kept := 0
			for name := range fams {
				if _, ok := allow[name]; ok {
					kept++
				}
			}
			if kept != benchAllowed {
				b.Fatalf("kept %d families", kept)
			}
		}
	})
	b.Run("Decoder", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.NewFormat(expfmt.TypeTextPlain))
			kept := 0
			for {
				var mf dto.MetricFamily
				err := dec.Decode(&mf)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, ok := allow[mf.GetName()]; ok {
					kept++
				}
			}
			if kept != benchAllowed {
				b.Fatalf("kept %d families", kept)
			}
		}
	})
	b.Run("FilterThenTextParser", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			fams, _, err := parseFamilies(body, allow)
			if err != nil || len(fams) != benchAllowed {
				b.Fatalf("kept %d families: %v", len(fams), err)
			}
		}
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
			s, err := cfg.decode(bodies[i], &targets[i], allow, now)
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
