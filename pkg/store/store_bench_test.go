// The race build leaves this file out: its batches come from the kubelet
// source's decoder, whose package holds the kubelet client and with it
// client-go, and a race build of client-go is most of what the race stage
// would cost (docs/testing.md). Benchmarks do not run under -race anyway.

//go:build !race

package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

var benchSizes = []int{1000, 5000}

const (
	benchPods       = 30
	benchContainers = 2
)

// benchCycle returns one scrape cycle of batches for nodes nodes, sampled
// at t.
func benchCycle(b *testing.B, nodes int, t time.Time) ([]string, []*sources.Batch) {
	b.Helper()
	rng := rand.New(rand.NewPCG(42, uint64(t.Unix())))
	names := make([]string, nodes)
	batches := make([]*sources.Batch, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%d", i)
		body := summarytest.Generate(rng, summarytest.Node{Name: names[i], Pods: benchPods, Containers: benchContainers, Time: t})
		batch, err := kubelet.Decode(names[i], body)
		if err != nil {
			b.Fatal(err)
		}
		batches[i] = batch
	}
	return names, batches
}

// BenchmarkStoreWrite stores a whole cycle (every node once) into a store
// that holds the previous cycle, so every series derives a rate.
func BenchmarkStoreWrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			names, first := benchCycle(b, n, t1)
			_, second := benchCycle(b, n, t1.Add(15*time.Second))
			clk := clocktesting.NewFakeClock(t1)
			s := New(Config{Clock: clk, Sources: []string{"kubelet"}, FirstWindowMax: 30 * time.Second, StaleAfter: 40 * time.Second})
			for i := range names {
				s.Store("kubelet", names[i:i+1], first[i], t1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cycle := 0
			for b.Loop() {
				batches := second
				if cycle%2 == 1 {
					batches = first
				}
				cycle++
				for i := range names {
					s.Store("kubelet", names[i:i+1], batches[i], t1)
				}
			}
		})
	}
}

// BenchmarkDecodeAndStore is one full cycle of the hot path: decode every
// node's Summary and store it.
func BenchmarkDecodeAndStore(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			rng := rand.New(rand.NewPCG(7, 7))
			names := make([]string, n)
			bodies := make([][]byte, n)
			for i := range n {
				names[i] = fmt.Sprintf("node-%d", i)
				bodies[i] = summarytest.Generate(rng, summarytest.Node{Name: names[i], Pods: benchPods, Containers: benchContainers, Time: t1})
			}
			s := New(Config{Clock: clocktesting.NewFakeClock(t1), Sources: []string{"kubelet"}, FirstWindowMax: 30 * time.Second, StaleAfter: 40 * time.Second})
			b.ReportAllocs()
			for b.Loop() {
				for i := range names {
					batch, err := kubelet.Decode(names[i], bodies[i])
					if err != nil {
						b.Fatal(err)
					}
					s.Store("kubelet", names[i:i+1], batch, t1)
				}
			}
		})
	}
}
