package ukpd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

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
				batch, _, err := e.attribute(context.Background(), samples, t0, owned)
				if err != nil || len(batch.Pods) != n {
					b.Fatalf("attributed %d pods, %v; want %d", len(batch.Pods), err, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/instance")
		})
	}
}
