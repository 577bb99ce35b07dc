package promscrape

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"
)

type podList []Pod

func (l podList) ListPods() []Pod { return l }

// fakeEndpoint serves h on 127.0.0.1 and returns the port.
func fakeEndpoint(t *testing.T, h http.Handler) int {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

func textHandler(body func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = fmt.Fprint(w, body())
	}
}

// static serves body on 127.0.0.1 and returns the port.
func static(t *testing.T, body string) int {
	return fakeEndpoint(t, textHandler(func() string { return body }))
}

func vllmPod(name string, port int, labels map[string]string) Pod {
	return Pod{
		Namespace: "ns", Name: name, UID: "uid-" + name, IP: "127.0.0.1", Node: "n1", Running: true, Ready: true,
		Labels:      labels,
		Annotations: map[string]string{AnnotationScrape: "true", AnnotationPort: strconv.Itoa(port)},
	}
}

// TestCollectVLLMAndDCGM scrapes three vLLM pods (leader and two workers of
// one group) and a DCGM exporter on loopback, and checks every value of the
// batch: no pod, container or metric more or less than expected.
func TestCollectVLLMAndDCGM(t *testing.T) {
	var waiting atomic.Int64
	waiting.Store(4)
	leader := static(t, vllmText([2]float64{0, 0}, [2]float64{1, 1}, 0.1))
	w1 := fakeEndpoint(t, textHandler(func() string {
		w := float64(waiting.Load())
		return vllmText([2]float64{w, w}, [2]float64{8, 8}, 0.9)
	}))
	w2 := static(t, vllmText([2]float64{1, 2}, [2]float64{8, 8}, 0.7))
	dcgm := static(t, dcgmText("n1", []dcgmGPU{{0, "ns", "web-0-1", "vllm", 90, 70000}, {1, "ns", "web-0-1", "vllm", 70, 60000}, {2, "", "", "", 0, 0}}))
	pods := podList{
		vllmPod("web-0", leader, nil), vllmPod("web-0-1", w1, nil), vllmPod("web-0-2", w2, nil),
		{Namespace: "gpu", Name: "dcgm-x", IP: "127.0.0.1", Node: "n1", Running: true, Labels: map[string]string{"app": "dcgm"}},
		// The DaemonSet's next pod on the same node, during a rollout: the
		// same GPUs must not count twice.
		{Namespace: "gpu", Name: "dcgm-y", IP: "127.0.0.1", Node: "n1", Running: true, Labels: map[string]string{"app": "dcgm"}},
		{Namespace: "ns", Name: "pending", Annotations: map[string]string{AnnotationScrape: "true", AnnotationPort: "1"}},
	}
	cfg := mustParse(t, fmt.Sprintf("presets: [vllm, dcgm]\nnodeExporters: [{name: dcgm, selector: app=dcgm, port: %d, namespaces: [gpu], metrics: [gpu-utilization, gpu-memory-used-mib]}]\n", dcgm))
	clk := clocktesting.NewFakeClock(now)
	src := newCollector(t, cfg, pods, Options{Clock: clk})
	batch := src.collectOK(t)
	v := func(m string, x float64, n int) Value { return Value{Metric: m, Value: x, Timestamp: now, Series: n} }
	want := Batch{Pods: []PodValues{
		{Namespace: "ns", Name: "web-0", UID: "uid-web-0", Values: []Value{
			v("vllm-kv-cache-usage", 0.1, 1), v("vllm-num-requests-running", 2, 2), v("vllm-num-requests-waiting", 0, 2),
		}},
		// web-0-1 has the exporter's GPU values too, under the UID of the
		// pod the exporter named, from the same list.
		{Namespace: "ns", Name: "web-0-1", UID: "uid-web-0-1", Values: []Value{
			v("gpu-memory-used-mib", 130000, 2), v("gpu-utilization", 80, 2),
			v("vllm-kv-cache-usage", 0.9, 1), v("vllm-num-requests-running", 16, 2), v("vllm-num-requests-waiting", 8, 2),
		}, Containers: []ContainerValues{{Name: "vllm", Values: []Value{v("gpu-memory-used-mib", 130000, 2), v("gpu-utilization", 80, 2)}}}},
		{Namespace: "ns", Name: "web-0-2", UID: "uid-web-0-2", Values: []Value{
			v("vllm-kv-cache-usage", 0.7, 1), v("vllm-num-requests-running", 16, 2), v("vllm-num-requests-waiting", 3, 2),
		}},
	}}
	if checkDiff(t, "batch", want, batch, cmpopts.EquateEmpty()); t.Failed() {
		t.FailNow()
	}
	// The queue of one worker grows; the next tick sees it.
	waiting.Store(10)
	clk.Step(15 * time.Second)
	batch, _ = src.Collect(t.Context())
	if got := batch.Pods[1].Values[4]; got.Metric != "vllm-num-requests-waiting" || got.Value != 20 {
		t.Fatalf("after the queue grew: %+v, want vllm-num-requests-waiting 20", got)
	}
}

func TestCollectCounterRate(t *testing.T) {
	var total atomic.Int64
	port := fakeEndpoint(t, textHandler(func() string {
		return fmt.Sprintf("# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"m\"} %d\n", total.Load())
	}))
	cfg := mustParse(t, "metrics: [{name: prompt-tokens-per-second, series: \"vllm:prompt_tokens_total\", type: counter, combine: sum}]\n")
	clk := clocktesting.NewFakeClock(now)
	pods := &podsNow{pods: podList{vllmPod("p", port, nil)}}
	src := newCollector(t, cfg, pods, Options{Clock: clk})
	// rate is 60 tokens/s for the pod of uid, at now+at.
	rate := func(uid string, at time.Duration) []PodValues {
		return []PodValues{{Namespace: "ns", Name: "p", UID: uid, Values: []Value{
			{Metric: "prompt-tokens-per-second", Value: 60, Timestamp: now.Add(at), Series: 1},
		}}}
	}
	for i, tick := range []struct {
		name  string
		total int64
		uid   string // of the pod, recreated when it changes
		want  []PodValues
	}{
		{"first tick", 1000, "uid-p", nil},
		{"second tick", 1600, "uid-p", rate("uid-p", 10*time.Second)},
		{"after a reset", 5, "uid-p", nil}, // a restart: no rate, never negative
		// The pod is recreated under its name (a new UID) and its new
		// counter is already past the old one: a new series, not a rate of
		// 599.5/s across two pods.
		{"first tick of the recreated pod", 6000, "uid-p-2", nil},
		{"second tick of the recreated pod", 6600, "uid-p-2", rate("uid-p-2", 40*time.Second)},
	} {
		if i > 0 {
			clk.Step(10 * time.Second)
		}
		if p := pods.ListPods()[0]; p.UID != tick.uid {
			p.UID = tick.uid
			pods.set(podList{p})
		}
		total.Store(tick.total)
		b, errs := src.Collect(t.Context())
		if diff := cmp.Diff(Batch{Pods: tick.want}, b, cmpopts.EquateEmpty()); diff != "" || len(errs) > 0 {
			t.Fatalf("%s (-want +got):\n%s\nerrors: %v", tick.name, diff, errs)
		}
	}
}

// podsNow is a PodLister whose pods a test replaces between ticks.
type podsNow struct {
	mu   sync.Mutex
	pods podList
}

func (p *podsNow) ListPods() []Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods
}

func (p *podsNow) set(pods podList) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = pods
}

// TestCollectFaults checks the reason of each way a target can fail, and
// that the healthy target's values survive every one of them.
func TestCollectFaults(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang := func(r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	handlers := map[string]http.HandlerFunc{
		"status": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) },
		"large":  textHandler(func() string { return "# " + strings.Repeat("x", 2000) + "\n" }),
		"decode": textHandler(func() string { return "sglang:num_queue_reqs{model_name=\"m\" 7\n" }),
		"slow":   func(_ http.ResponseWriter, r *http.Request) { hang(r) },
		// Headers and a first line at once, then nothing: the timeout
		// bounds reading the body too, not only the wait for headers.
		"trickle": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = fmt.Fprint(w, "# TYPE sglang:num_queue_reqs gauge\n")
			w.(http.Flusher).Flush()
			hang(r)
		},
		"ok": textHandler(func() string { return "sglang:num_queue_reqs 3\n" }),
		"redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		},
	}
	var pods podList
	for name, h := range handlers {
		pods = append(pods, vllmPod(name, fakeEndpoint(t, h), nil))
	}
	// A closed server's port refuses connections.
	srvClosed := httptest.NewServer(http.NotFoundHandler())
	srvClosed.Close()
	pods = append(pods, vllmPod("refused", srvClosed.Listener.Addr().(*net.TCPAddr).Port, nil))

	cfg := mustParse(t, "presets: [sglang]\ntimeout: 200ms\nmaxBytes: 1000\n")
	b, errs := newCollector(t, cfg, pods, Options{}).Collect(t.Context())
	checkDiff(t, "failure reasons", map[string]string{
		"pod/ns/status": "http_status", "pod/ns/large": "too_large", "pod/ns/decode": "decode",
		"pod/ns/slow": "timeout", "pod/ns/trickle": "timeout", "pod/ns/refused": "connection", "pod/ns/redirect": "http_status",
	}, reasons(errs))
	if len(b.Pods) != 1 || b.Pods[0].Name != "ok" || b.Pods[0].Values[0].Value != 3 {
		t.Errorf("healthy target lost: %+v", b)
	}
}

func TestTargets(t *testing.T) {
	cfg := mustParse(t, `presets: [vllm]
pods: {selector: "app=vllm", port: 8000, prometheusAnnotations: true}
nodeExporters: [{name: dcgm, selector: app=dcgm, port: 9400, path: "/metrics?format=text", namespaces: [ns], metrics: [vllm-num-requests-waiting]}]
`)
	pod := func(name string, labels, ann map[string]string) Pod {
		return Pod{Namespace: "ns", Name: name, IP: "127.0.0." + strconv.Itoa(len(name)), Node: "n-" + name, Running: true, Labels: labels, Annotations: ann}
	}
	pods := []Pod{
		pod("selected", map[string]string{"app": "vllm"}, nil),
		pod("opted-out", map[string]string{"app": "vllm"}, map[string]string{AnnotationScrape: "false"}),
		pod("own", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "9000", AnnotationPath: "/m", AnnotationScheme: "https"}),
		pod("prom", nil, map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}),
		pod("own-wins", nil, map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080", AnnotationPort: "8081"}),
		pod("badport", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "http"}),
		pod("noport", nil, map[string]string{AnnotationScrape: "yes"}),
		pod("exporter", map[string]string{"app": "dcgm"}, nil),
		{Namespace: "ns", Name: "no-ip", Running: true, Annotations: map[string]string{AnnotationScrape: "true", AnnotationPort: "1"}},
	}
	targets, errs := cfg.Targets(pods)
	got := map[string]string{}
	for _, tg := range targets {
		got[tg.ID] = tg.URL
	}
	checkDiff(t, "targets", map[string]string{
		"pod/ns/selected":           "http://127.0.0.8:8000/metrics",
		"pod/ns/own":                "https://127.0.0.3:9000/m",
		"pod/ns/prom":               "http://127.0.0.4:8080/metrics",
		"pod/ns/own-wins":           "http://127.0.0.8:8081/metrics",
		"exporter/dcgm/ns/exporter": "http://127.0.0.8:9400/metrics?format=text",
	}, got)
	checkDiff(t, "errors", []string{
		`pod ns/badport: port annotation "http" is not a port`,
		`pod ns/noport: scrape annotation "yes" must be true or false`,
	}, errStrings(errs))

	// Without prometheusAnnotations, prometheus.io/* is not read.
	cfg = mustParse(t, "presets: [vllm]\n")
	if targets, _ := cfg.Targets(pods[3:4]); len(targets) != 0 {
		t.Errorf("prometheus.io annotations honoured without the option: %+v", targets)
	}
}
