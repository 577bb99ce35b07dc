package kubelet

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

// BenchmarkDecode decodes one node's Summary of 30 pods × 2 containers:
// with the package's reader, and with what it stands in for, encoding/json
// into k8s.io/kubelet's Summary type and then the same batch.
func BenchmarkDecode(b *testing.B) {
	body := summarytest.Generate(rand.New(rand.NewPCG(1, 2)), summarytest.Node{
		Name: "node-0", Pods: 30, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	})
	want, err := Decode("node-0", body)
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, decode func() (*sources.Batch, error)) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				got, err := decode()
				if err != nil {
					b.Fatal(err)
				}
				if len(got.Pods) != len(want.Pods) {
					b.Fatalf("got %d pods, want %d", len(got.Pods), len(want.Pods))
				}
			}
		})
	}
	run("reader", func() (*sources.Batch, error) { return Decode("node-0", body) })
	run("stats-types", func() (*sources.Batch, error) {
		var s statsv1alpha1.Summary
		if err := json.Unmarshal(body, &s); err != nil {
			return nil, err
		}
		return fromSummary("node-0", &s)
	})
}
