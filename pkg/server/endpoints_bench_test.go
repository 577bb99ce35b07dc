package server

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

const (
	benchEndpointPods  = 1000
	benchGroupSize     = 4
	benchMetrics       = 5
	benchEngines       = 4 // series per metric: 5 × 4 = 20 allow-listed series per pod
	benchOtherFamilies = 48
)

// benchEndpointBody is one engine's exposition: benchMetrics allow-listed
// gauges with benchEngines series each, among benchOtherFamilies
// ten-bucket families the filter drops (about 500 series in all).
func benchEndpointBody(rng *rand.Rand) string {
	var b strings.Builder
	for f := range benchOtherFamilies {
		fmt.Fprintf(&b, "# HELP other_seconds_%d Some help text.\n# TYPE other_seconds_%d histogram\n", f, f)
		for le := range 10 {
			fmt.Fprintf(&b, "other_seconds_%d_bucket{engine=\"0\",le=\"%d\",model_name=\"m\"} %d\n", f, le, rng.Intn(1000))
		}
		if f%10 == 0 && f/10 < benchMetrics {
			m := f / 10
			fmt.Fprintf(&b, "# TYPE bench:metric_%d gauge\n", m)
			for e := range benchEngines {
				fmt.Fprintf(&b, "bench:metric_%d{engine=\"%d\",model_name=\"m\"} %d\n", m, e, rng.Intn(100))
			}
		}
	}
	return b.String()
}

// BenchmarkPodEndpointsTick is one tick of the pod-endpoint source as the
// server runs it, at 1,000 pods × 20 allow-listed series (250
// LeaderWorkerSet groups of 4): Collect over HTTP on loopback (every pod's
// endpoint served by one httptest server, told apart by path), the store's
// Update, then the reads an HPA and a user make: the leaders' group values
// by the scale selector, and every pod's own value. It reports CPU
// seconds per tick (user + system, from getrusage: every goroutine,
// the httptest server's too) and the heap the source, store and provider
// keep after the ticks.
func BenchmarkPodEndpointsTick(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	bodies := map[string]string{}
	for i := range benchEndpointPods {
		bodies["/metrics/"+strconv.Itoa(i)] = benchEndpointBody(rng)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(bodies[r.URL.Path]))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	idx := podcache.NewPodIndex()
	for i := range benchEndpointPods {
		g, w := i/benchGroupSize, i%benchGroupSize
		name := fmt.Sprintf("lws-%d", g)
		if w > 0 {
			name += "-" + strconv.Itoa(w)
		}
		idx.Set(podcache.NewPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name),
				Labels: map[string]string{group.LabelName: "lws", group.LabelGroupIndex: strconv.Itoa(g), group.LabelWorkerIndex: strconv.Itoa(w)},
				Annotations: map[string]string{
					promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: port,
					promscrape.AnnotationPath: "/metrics/" + strconv.Itoa(i),
				}},
			Spec:   corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
		}))
	}
	var file strings.Builder
	file.WriteString("timeout: 10s\nmetrics:\n")
	for m := range benchMetrics {
		fmt.Fprintf(&file, "- {name: metric-%d, series: \"bench:metric_%d\", type: gauge, combine: sum}\n", m, m)
	}
	cfg, errs := promscrape.Parse([]byte(file.String()))
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	heapBefore := heapInuse()
	c := (&Config{Clock: clk, Resolution: 15 * time.Second, Timeout: 10 * time.Second, Concurrency: 64, PodMetrics: cfg}).Complete()
	sc, st := c.endpointPipeline(idx)
	p := provider.New(provider.Config{Pods: idx, Nodes: podcache.NewNodeIndex(), Usage: nil, Clock: clk, Groups: true})
	cm := p.CustomMetrics().WithEndpoints(st, endpointMetrics(cfg), c.Resolution)
	info := cmprovider.CustomMetricInfo{GroupResource: schemaPods, Namespaced: true, Metric: "metric-0"}
	leaders := labels.SelectorFromSet(labels.Set{group.LabelName: "lws", group.LabelWorkerIndex: "0"})
	ctx := context.Background()

	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sc.Tick(ctx)
		got, err := cm.GetMetricBySelector(ctx, "ml", leaders, info, labels.Everything())
		if err != nil || len(got.Items) != benchEndpointPods/benchGroupSize {
			b.Fatalf("leaders' values: %d, %v; failing targets %v", len(got.Items), err, sc.TargetErrors())
		}
		all, err := cm.GetMetricBySelector(ctx, "ml", labels.Everything(), info, labels.Everything())
		if err != nil || len(all.Items) != benchEndpointPods {
			b.Fatalf("every pod's values: %d, %v", len(all.Items), err)
		}
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()) + time.Duration(after.Stime.Nano()-before.Stime.Nano())
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/tick")
	// What the source, the store and the provider keep between ticks
	// (the bodies and the pod index were made before).
	b.ReportMetric(float64(int64(heapInuse())-int64(heapBefore))/(1<<20), "retained-MiB")
	runtime.KeepAlive(cm)
}

var schemaPods = schema.GroupResource{Resource: "pods"}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
