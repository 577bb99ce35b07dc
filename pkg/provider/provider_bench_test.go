package provider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// benchProvider builds a provider over nodes × 30 pods × 2 containers, every
// pod with fresh usage. Pods of node i carry app=deploy-<i%1000>, so a
// namespaced selector list as the HPA sends matches 3 pods per 1,000 nodes.
// rescrape stores the last cycle's batches again, as a new scrape does:
// every pod is replaced.
func benchProvider(b *testing.B, nodes int) (p *Provider, rescrape func()) {
	b.Helper()
	var names []string
	var batches []*sources.Batch
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	st := store.New(store.Config{Clock: clk, Sources: []string{"kubelet"}, FirstWindowMax: 30 * time.Second, StaleAfter: time.Hour})
	pods, nodeIndex := podcache.NewPodIndex(), podcache.NewNodeIndex()
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		nodeIndex.Set(podcache.NewNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		for round, ts := range []time.Time{t0.Add(-15 * time.Second), t0} {
			// The same seed in both rounds gives the same pods (and UIDs).
			rng := rand.New(rand.NewPCG(uint64(i), 4))
			batch, err := kubelet.Decode(name, summarytest.Generate(rng, summarytest.Node{Name: name, Pods: 30, Containers: 2, Time: ts, Start: t0.Add(-time.Hour)}))
			must(b, err)
			// Both rounds are the same pods; the second yields rates.
			growCounters(batch, round)
			st.Store("kubelet", []string{name}, batch, t0)
			if round == 1 {
				names, batches = append(names, name), append(batches, batch)
				for _, pp := range batch.Pods {
					pods.Set(podcache.NewPod(&corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Name: pp.Name, Namespace: pp.Namespace, UID: types.UID(pp.UID),
							Labels: map[string]string{"app": fmt.Sprintf("deploy-%d", i%1000)}},
						Spec: corev1.PodSpec{NodeName: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}))
				}
			}
		}
	}
	rescrape = func() {
		for i := range names {
			st.Store("kubelet", names[i:i+1], batches[i], t0)
		}
	}
	return New(Config{Pods: pods, Nodes: nodeIndex, Usage: st, Clock: clk}), rescrape
}

// growCounters makes round 1 a later sample of round 0's series: same start
// times, counters above.
func growCounters(b *sources.Batch, round int) {
	for i := range b.Pods {
		for j := range b.Pods[i].Containers {
			b.Pods[i].Containers[j].CPUCoreNanos = uint64(1e12) + uint64(round)*uint64(3e9)
		}
	}
	for i := range b.Nodes {
		b.Nodes[i].CPUCoreNanos = uint64(1e13) + uint64(round)*uint64(30e9)
	}
}

// BenchmarkListAllPods is a full list once every pod's usage is derived
// and shaped, and each namespace's snapshot joined: one list before the
// timer starts does that (a collection may drop a snapshot, and the next
// list joins it again). Its floor is what the getter's shape costs
// whatever the provider does: the []PodMetrics of every listed pod,
// holding only the pod's name, namespace and labels.
func BenchmarkListAllPods(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		p, _ := benchProvider(b, n)
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			listAll(b, p, n)
			b.ReportAllocs()
			for b.Loop() {
				listAll(b, p, n)
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/floor", n), func(b *testing.B) { benchFloor(b, p, n, 0) })
	}
}

// BenchmarkListAllPodsAfterScrape is the first full list after a scrape
// cycle replaced every pod, when nothing derived from the samples is kept
// yet. The store write between lists is not timed.
func BenchmarkListAllPodsAfterScrape(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			p, rescrape := benchProvider(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				rescrape()
				b.StartTimer()
				listAll(b, p, n)
			}
		})
		// What a list after a scrape costs whatever the provider does:
		// the items, and per container the ResourceList map of the API
		// type with its two quantities.
		b.Run(fmt.Sprintf("nodes=%d/floor", n), func(b *testing.B) {
			p, _ := benchProvider(b, n)
			benchFloor(b, p, n, 2)
		})
	}
}

// listAll lists every pod of a benchProvider of n nodes.
func listAll(b *testing.B, p *Provider, n int) {
	items, err := p.ListPodMetrics(context.Background(), "", labels.Everything(), fields.Everything())
	if err != nil || len(items) != n*30 {
		b.Fatalf("got %d items, %v; want %d", len(items), err, n*30)
	}
}

// benchFloor makes the []PodMetrics of every listed pod, holding only the
// pod's name, namespace and labels, and containers (the fixture's count a
// pod) with their usage.
func benchFloor(b *testing.B, p *Provider, n, containers int) {
	cpu, mem := resource.MustParse("100m"), resource.MustParse("1Mi")
	b.ReportAllocs()
	for b.Loop() {
		pods := p.pods.List("", labels.Everything())
		out := make([]metricsapi.PodMetrics, 0, len(pods))
		for _, pod := range pods {
			var cs []metricsapi.ContainerMetrics
			if containers > 0 {
				cs = make([]metricsapi.ContainerMetrics, containers)
				for i := range cs {
					cs[i] = metricsapi.ContainerMetrics{Name: "c", Usage: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}}
				}
			}
			out = append(out, metricsapi.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels}, Containers: cs})
		}
		if len(out) != n*30 {
			b.Fatalf("got %d items, want %d", len(out), n*30)
		}
	}
}

func BenchmarkListNamespaceSelector(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			p, _ := benchProvider(b, n)
			sel := labels.SelectorFromSet(labels.Set{"app": "deploy-3"})
			b.ReportAllocs()
			for b.Loop() {
				items, err := p.ListPodMetrics(context.Background(), "ns-3", sel, fields.Everything())
				if err != nil || len(items) == 0 {
					b.Fatalf("got %d items, %v", len(items), err)
				}
			}
		})
	}
}
