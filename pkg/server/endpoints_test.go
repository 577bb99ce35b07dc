package server

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// TestEndpointPodsTrustFields: the source learns each pod's hostNetwork and
// service account, by which it refuses pods it must not trust.
func TestEndpointPodsTrustFields(t *testing.T) {
	tests := []struct {
		name           string
		spec           corev1.PodSpec
		hostNetwork    bool
		serviceAccount string
	}{
		{name: "pod network, default account", spec: corev1.PodSpec{NodeName: "n1"}},
		{name: "host network", spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true}, hostNetwork: true},
		{name: "own service account", spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "dcgm"}, serviceAccount: "dcgm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx := podcache.NewPodIndex()
			idx.Set(podcache.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu", Name: "p", UID: "uid-p"},
				Spec: tt.spec, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}))
			want := []promscrape.Pod{{Namespace: "gpu", Name: "p", UID: "uid-p", IP: "10.0.0.1", Node: "n1", Running: true,
				HostNetwork: tt.hostNetwork, ServiceAccount: tt.serviceAccount}}
			if diff := cmp.Diff(want, endpointPods{idx}.ListPods()); diff != "" {
				t.Errorf("ListPods (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodEndpointsBoundHeaders: a pod endpoint whose response headers pass
// maxEndpointHeaderBytes fails its scrape; one under it is read.
func TestPodEndpointsBoundHeaders(t *testing.T) {
	tests := []struct {
		name        string
		headerBytes int
		wantFailing map[string]string
	}{
		{name: "a few KiB of headers are read", headerBytes: 4 << 10, wantFailing: map[string]string{}},
		{name: "headers past the bound fail the target", headerBytes: maxEndpointHeaderBytes + 1, wantFailing: map[string]string{"pod/ml/p": "connection"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Pad", strings.Repeat("x", tt.headerBytes))
				_, _ = fmt.Fprint(w, "sglang:num_queue_reqs 3\n")
			}))
			t.Cleanup(srv.Close)
			c := endpointConfig(t, "presets: [sglang]\ntimeout: 5s\n", clocktesting.NewFakeClock(time.Now()))
			sc, _ := c.endpointPipeline(optedIn("n1", srv.Listener.Addr().(*net.TCPAddr).Port))
			sc.Tick(t.Context())
			if diff := cmp.Diff(tt.wantFailing, sc.TargetErrors()); diff != "" {
				t.Errorf("failing targets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodEndpointsReady: a replica is not ready until the pod endpoints'
// scraper has completed the ticks their values need: one for gauges, two
// when a metric is read from counters (a counter, a histogram's parts, a
// ratio's); a target that fails does not hold it back.
func TestPodEndpointsReady(t *testing.T) {
	tests := []struct {
		name, file string
		need       int
	}{
		{name: "gauges", file: "presets: [sglang]\n", need: 1},
		{name: "a counter", file: "presets: [sglang]\nmetrics:\n- {name: tokens, series: vllm:generation_tokens_total, type: counter, combine: sum}\n", need: 2},
		{name: "a histogram", file: "presets: [sglang, vllm-latency]\n", need: 2},
		{name: "a ratio", file: "presets: [sglang]\nmetrics:\n- {name: e, series: errors_total, denominator: requests_total, type: ratio}\n", need: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := endpointConfig(t, tt.file, clocktesting.NewFakeClock(time.Now()))
			sc, _ := c.endpointPipeline(optedIn("", 1)) // an endpoint that refuses connections
			ready := endpointsReady(c.PodMetrics, sc)
			for tick := range tt.need {
				if err := ready(nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("collected %d times, %d needed", tick, tt.need)) {
					t.Fatalf("after %d collections: %v, want not ready", tick, err)
				}
				sc.Tick(t.Context())
			}
			if err := ready(nil); err != nil {
				t.Errorf("after %d collections: %v, want ready", tt.need, err)
			}
			if len(sc.TargetErrors()) != 1 {
				t.Errorf("failing targets %v, want the refusing pod", sc.TargetErrors())
			}
		})
	}
}

// optedIn is a pod cache of pod ml/p on node, at 127.0.0.1, whose scrape
// annotations name its endpoint on port.
func optedIn(node string, port int) *podcache.PodIndex {
	idx := podcache.NewPodIndex()
	idx.Set(podcache.NewPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", UID: "uid-p",
			Annotations: map[string]string{promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: strconv.Itoa(port)}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}))
	return idx
}

// endpointConfig is a completed Config, on clk, of the pod metrics file.
func endpointConfig(t *testing.T, file string, clk *clocktesting.FakeClock) CompletedConfig {
	t.Helper()
	cfg, errs := promscrape.Parse([]byte(file))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return (&Config{Clock: clk, Resolution: 15 * time.Second, Timeout: 10 * time.Second, Concurrency: 1, PodMetrics: cfg}).Complete()
}

// endpointPipeline is the pod-endpoint part of New: the source on a
// scraper of its own, storing into a store of its own.
func (c CompletedConfig) endpointPipeline(pods podcache.Pods) (*sources.Scraper, *store.Store) {
	st := store.New(store.Config{Clock: c.Clock, Sources: []string{promscrape.SourceName}, StaleAfter: 2*c.Resolution + c.Timeout})
	return sources.NewScraper(sources.ScraperConfig{Sources: []sources.Source{c.endpointSource(pods)}, Sink: st, Series: st,
		Clock: c.Clock, Resolution: c.Resolution, Timeout: c.Timeout, Concurrency: c.Concurrency}), st
}

// TestPodEndpointsRatio: a ratio of two counter rates, served on a pod
// through the scraper, the store and the provider: 6 errors in 120 new
// requests of two models (one with no error series) over 15 s is 0.05.
func TestPodEndpointsRatio(t *testing.T) {
	var errors, requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, "# TYPE errors counter\nerrors_total{model=\"a\"} %d\n# TYPE requests counter\nrequests_total{model=\"a\"} %d\nrequests_total{model=\"b\"} %d\n",
			errors.Load(), requests.Load(), 2*requests.Load())
	}))
	t.Cleanup(srv.Close)
	idx := optedIn("n1", srv.Listener.Addr().(*net.TCPAddr).Port)
	clk := clocktesting.NewFakeClock(time.Now())
	const file = "timeout: 5s\nmetrics:\n- {name: errors-per-request, series: errors_total, denominator: requests_total, type: ratio}\n"
	c := endpointConfig(t, file, clk)
	sc, st := c.endpointPipeline(idx)
	cm := provider.New(provider.Config{Pods: idx, Nodes: podcache.NewNodeIndex(), Clock: clk}).CustomMetrics().
		WithEndpoints(st, endpointMetrics(c.PodMetrics), c.Resolution)
	info := cmprovider.CustomMetricInfo{GroupResource: schemaPods, Namespaced: true, Metric: "errors-per-request"}
	p := types.NamespacedName{Namespace: "ml", Name: "p"}
	errors.Store(10)
	requests.Store(100)
	sc.Tick(t.Context())
	if v, err := cm.GetMetricByName(t.Context(), p, info, labels.Everything()); err == nil {
		t.Fatalf("after one collection: %v, want no rate yet", v.Value.String())
	}
	errors.Store(16)
	requests.Store(140) // +40 for model a, +80 for model b
	clk.Step(15 * time.Second)
	sc.Tick(t.Context())
	v, err := cm.GetMetricByName(t.Context(), p, info, labels.Everything())
	if err != nil {
		t.Fatalf("after two collections: %v (failing targets %v)", err, sc.TargetErrors())
	}
	if got := v.Value.MilliValue(); got != 50 {
		t.Errorf("errors per request = %dm, want 50m", got)
	}
	// A selector on the model reads that model's ratio: 6 of 40.
	v, err = cm.GetMetricByName(t.Context(), p, info, labels.SelectorFromSet(labels.Set{"model": "a"}))
	if err != nil || v.Value.MilliValue() != 150 {
		t.Errorf("model a: %v, %v; want 150m", v, err)
	}
	// No request in the next interval: 0 (idle: zero, the default), so an
	// HPA on it may scale down.
	clk.Step(15 * time.Second)
	sc.Tick(t.Context())
	if v, err = cm.GetMetricByName(t.Context(), p, info, labels.Everything()); err != nil || v.Value.MilliValue() != 0 {
		t.Errorf("idle: %v, %v; want 0", v, err)
	}
}
