package kubelet

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

// BenchmarkDecode decodes one node's Summary of 30 pods × 2 containers.
func BenchmarkDecode(b *testing.B) {
	body := summarytest.Generate(rand.New(rand.NewPCG(1, 2)), summarytest.Node{
		Name: "node-0", Pods: 30, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	})
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("node-0", body); err != nil {
			b.Fatal(err)
		}
	}
}
