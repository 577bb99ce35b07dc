package promscrape

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// counterDeltas reads c's counters of kind and each label; call the
// returned func to get how much each grew since, by "kind/label".
func counterDeltas(t *testing.T, c *metrics.CounterVec, kind string, labels ...string) func() map[string]float64 {
	t.Helper()
	RegisterMetrics()
	read := func() map[string]float64 {
		out := map[string]float64{}
		for _, l := range labels {
			v, err := testutil.GetCounterMetricValue(c.WithLabelValues(kind, l))
			must(t, err)
			out[kind+"/"+l] = v
		}
		return out
	}
	before := read()
	return func() map[string]float64 {
		after := read()
		for k := range after {
			after[k] -= before[k]
		}
		return after
	}
}

func podNames(b Batch) (names []string) {
	for _, p := range b.Pods {
		names = append(names, p.Name)
	}
	return names
}

func reasons(errs []TargetError) map[string]string {
	out := map[string]string{}
	for _, e := range errs {
		out[e.ID] = e.Reason
	}
	return out
}

func TestTargetsRefuseUntrustedPods(t *testing.T) {
	file := `presets: [dcgm]
nodeExporters: [{name: dcgm, selector: app=dcgm, port: 9400, namespaces: [gpu, gpu-2], serviceAccounts: [dcgm], metrics: [gpu-utilization]}]
`
	exporter := func(ns, name, sa string) Pod {
		return Pod{Namespace: ns, Name: name, UID: "uid-" + name, IP: "127.0.0.1", Node: "n1", Running: true, Labels: map[string]string{"app": "dcgm"}, ServiceAccount: sa}
	}
	hostNet := Pod{Namespace: "ns", Name: "host", UID: "uid-host", IP: "127.0.0.1", Node: "n1", Running: true, HostNetwork: true,
		Annotations: map[string]string{AnnotationScrape: "true", AnnotationPort: "8000"}}
	pods := []Pod{
		exporter("gpu", "dcgm-a", "dcgm"), exporter("gpu-2", "dcgm-b", "dcgm"),
		exporter("tenant", "fake", "dcgm"), exporter("gpu", "wrong-sa", "default"), hostNet,
	}
	tests := []struct {
		name, extra  string
		wantTargets  []string
		wantRefusals []string
	}{
		{name: "exporters only from their namespaces and service accounts, no hostNetwork pod",
			wantTargets:  []string{"exporter/dcgm/gpu-2/dcgm-b", "exporter/dcgm/gpu/dcgm-a"},
			wantRefusals: []string{"tenant/fake:exporter_namespace", "gpu/wrong-sa:exporter_service_account", "ns/host:host_network"}},
		{name: "hostNetwork pods allowed by pods.allowHostNetwork", extra: "pods: {allowHostNetwork: true}\n",
			wantTargets:  []string{"exporter/dcgm/gpu-2/dcgm-b", "exporter/dcgm/gpu/dcgm-a", "pod/ns/host"},
			wantRefusals: []string{"tenant/fake:exporter_namespace", "gpu/wrong-sa:exporter_service_account"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			targets, errs := mustParse(t, file+tt.extra).Targets(pods)
			var ids, refusals []string
			for _, tg := range targets {
				ids = append(ids, tg.ID)
			}
			for _, err := range errs {
				var r *RefusedError
				if !errors.As(err, &r) {
					t.Fatalf("unexpected error %v", err)
				}
				refusals = append(refusals, r.Pod+":"+r.Reason)
			}
			checkDiff(t, "targets", tt.wantTargets, ids)
			checkDiff(t, "refusals", tt.wantRefusals, refusals)
		})
	}
}

// TestCollectExporterAdmission: an exporter speaks only for pods on its own
// node, only for its own metrics, never over a pod's own target, and only
// within the metrics' bounds; a look-alike exporter in a tenant's namespace
// is not scraped at all.
func TestCollectExporterAdmission(t *testing.T) {
	// The trusted exporter on n1 names: web-0 (on n1), far (on n2), ghost
	// (no such pod) and own (on n1, whose own target reports the same
	// metric and container); GPU 4 reads 150%, beyond the bound; and it
	// serves a vLLM family that is not among its metrics.
	trusted := static(t, dcgmText("n1", []dcgmGPU{
		{0, "ns", "web-0", "vllm", 50, 1000}, {1, "ns", "far", "vllm", 60, 1000}, {2, "ns", "ghost", "vllm", 70, 1000},
		{3, "ns", "own", "vllm", 80, 1000}, {4, "ns", "web-0", "vllm", 150, 1000},
	})+"vllm:num_requests_waiting{namespace=\"ns\",pod=\"web-0\"} 99\n")
	fake := static(t, dcgmText("n1", []dcgmGPU{{0, "ns", "web-0", "vllm", 1, 1}}))
	own := static(t, "DCGM_FI_DEV_GPU_UTIL{container=\"vllm\"} 10\n")
	pods := podList{
		{Namespace: "gpu", Name: "dcgm-a", UID: "uid-dcgm-a", IP: "127.0.0.1", Node: "n1", Running: true, Labels: map[string]string{"app": "dcgm", "port": strconv.Itoa(trusted)}},
		{Namespace: "ns", Name: "fake-dcgm", UID: "uid-fake", IP: "127.0.0.1", Node: "n1", Running: true, Labels: map[string]string{"app": "dcgm", "port": strconv.Itoa(fake)}},
		{Namespace: "ns", Name: "web-0", UID: "uid-web-0", IP: "127.0.0.1", Node: "n1", Running: true},
		{Namespace: "ns", Name: "far", UID: "uid-far", IP: "127.0.0.1", Node: "n2", Running: true},
		vllmPod("own", own, nil),
	}
	// Both exporter pods serve on their own port, which one exporter
	// entry per port reaches.
	cfg := mustParse(t, fmt.Sprintf(`presets: [vllm, dcgm]
nodeExporters:
- {name: dcgm, selector: "app=dcgm,port=%d", port: %d, namespaces: [gpu], metrics: [gpu-utilization]}
- {name: fake, selector: "app=dcgm,port=%d", port: %d, namespaces: [gpu], metrics: [gpu-utilization]}
`, trusted, trusted, fake, fake))
	dropped := counterDeltas(t, droppedSamples, KindExporter, DropUnknownPod, DropOtherNode, DropOwnTarget, DropOutOfRange)
	refused := counterDeltas(t, refusedTargets, KindExporter, RefusedExporterNamespace)
	src := newCollector(t, cfg, pods, Options{Clock: clocktesting.NewFakeClock(now)})
	batch := src.collectOK(t)
	v := func(x float64) []Value {
		return []Value{{Metric: "gpu-utilization", Value: x, Timestamp: now, Series: 1}}
	}
	want := Batch{Pods: []PodValues{
		{Namespace: "ns", Name: "own", UID: "uid-own", Values: v(10), Containers: []ContainerValues{{Name: "vllm", Values: v(10)}}},
		{Namespace: "ns", Name: "web-0", UID: "uid-web-0", Values: v(50), Containers: []ContainerValues{{Name: "vllm", Values: v(50)}}},
	}}
	checkDiff(t, "batch", want, batch, cmpopts.EquateEmpty())
	// The exporter may be scraped before the pod's own target, as it was
	// here: the store served the pod's own word all the same. From the
	// next tick, the exporter's sample of it is dropped as own_target.
	if batch, errs := src.Collect(t.Context()); len(errs) > 0 || cmp.Diff(want, batch, cmpopts.EquateEmpty()) != "" {
		t.Errorf("second tick: %+v, %v; want the same values", batch, errs)
	}
	// The tenant's look-alike, matched by the second entry, is refused.
	checkDiff(t, "dropped samples", map[string]float64{"exporter/unknown_pod": 2, "exporter/other_node": 2, "exporter/own_target": 1,
		"exporter/out_of_range": 2}, dropped())
	checkDiff(t, "refused targets", map[string]float64{"exporter/exporter_namespace": 2}, refused())
	// A refusal is logged once, and remembered only while it lasts.
	checkDiff(t, "refusals remembered", map[refusalKey]bool{{uid: "uid-fake", target: "fake", reason: RefusedExporterNamespace}: true},
		src.refused, cmp.AllowUnexported(refusalKey{}))
	src.pods = pods[2:]
	if _, errs := src.Collect(t.Context()); len(errs) > 0 || len(src.refused) != 0 {
		t.Errorf("after the tenant's pod left: errors %v, refusals remembered %v", errs, src.refused)
	}
}

// TestCollectPointsPerCollection: a target that would take the collection
// past its points fails (too_large); of targets sending as many, the ones
// first by name keep theirs.
func TestCollectPointsPerCollection(t *testing.T) {
	two := "sglang:num_queue_reqs{e=\"0\"} 1\nsglang:num_queue_reqs{e=\"1\"} 2\n"
	pods := podList{vllmPod("a", static(t, two), nil), vllmPod("b", static(t, two), nil)}
	tests := []struct {
		name       string
		points     int
		wantPods   []string
		wantFailed map[string]string
	}{
		{"room for both", 4, []string{"a", "b"}, map[string]string{}},
		{"room for the first", 3, []string{"a"}, map[string]string{"pod/ns/b": "too_large"}},
		{"room for neither", 1, nil, map[string]string{"pod/ns/a": "too_large", "pod/ns/b": "too_large"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, fmt.Sprintf("presets: [sglang]\nlimits: {pointsPerCollection: %d}\n", tt.points))
			b, errs := newCollector(t, cfg, pods, Options{}).Collect(t.Context())
			checkDiff(t, "pods", tt.wantPods, podNames(b))
			checkDiff(t, "failed", tt.wantFailed, reasons(errs))
		})
	}
}

// TestCollectPointsGoToTheSmallest: past the budget, the target sending the
// most fails first, whatever its name's order, so one flooding pod cannot
// starve the others.
func TestCollectPointsGoToTheSmallest(t *testing.T) {
	var pods podList
	for i, n := range []int{3, 2, 2} {
		var body strings.Builder
		for e := range n {
			fmt.Fprintf(&body, "sglang:num_queue_reqs{e=\"%d\"} 1\n", e)
		}
		pods = append(pods, vllmPod(string(rune('a'+i)), static(t, body.String()), nil))
	}
	b, errs := newCollector(t, mustParse(t, "presets: [sglang]\nlimits: {pointsPerCollection: 4}\n"), pods, Options{}).Collect(t.Context())
	checkDiff(t, "pods kept", []string{"b", "c"}, podNames(b))
	if len(errs) != 1 || errs[0].ID != "pod/ns/a" || errs[0].Reason != "too_large" {
		t.Errorf("errors %v, want pod/ns/a too_large only", errs)
	}
}

// TestCollectDecodesAFewAtOnce: a body waits for one of decodeSlots before
// it is decoded, within its timeout; with every slot taken, targets fail
// as timeouts and nothing is decoded.
func TestCollectDecodesAFewAtOnce(t *testing.T) {
	pods := podList{vllmPod("a", static(t, "sglang:num_queue_reqs 3\n"), nil)}
	src := newCollector(t, mustParse(t, "presets: [sglang]\ntimeout: 200ms\n"), pods, Options{})
	for range decodeSlots {
		src.decoding <- struct{}{}
	}
	b, errs := src.Collect(t.Context())
	if len(b.Pods) != 0 || len(errs) != 1 || errs[0].Reason != "timeout" || !strings.Contains(errs[0].Err.Error(), "decode slot") {
		t.Fatalf("with every slot taken: pods %v, errors %v; want one timeout waiting for a slot", b.Pods, errs)
	}
	for range decodeSlots {
		<-src.decoding
	}
	if b, errs := src.Collect(t.Context()); len(b.Pods) != 1 || len(errs) != 0 {
		t.Fatalf("with the slots free: pods %v, errors %v; want the pod's value", b.Pods, errs)
	}
}

// stuckTransport answers the requests to one port only when release is
// closed, whatever their context says: a target that does not honour its
// timeout. Other requests go to loopback as usual.
type stuckTransport struct {
	port    string
	release chan struct{}
}

func (s *stuckTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Port() == s.port {
		<-s.release
		return nil, errors.New("released")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestCollectDoesNotWaitForAnOverrun: on the one scraper, a target that
// ignores its timeout is given up after the grace and skipped as busy until
// it ends; the healthy target is stored at every tick. Each tick returning
// at all shows it: the stuck target answers only when the test ends.
func TestCollectDoesNotWaitForAnOverrun(t *testing.T) {
	ok := static(t, "sglang:num_queue_reqs 3\n")
	stuck := &stuckTransport{port: "1", release: make(chan struct{})}
	t.Cleanup(func() { close(stuck.release) })
	pods := podList{vllmPod("ok", ok, nil), vllmPod("stuck", 1, nil)}
	src := newCollector(t, mustParse(t, "presets: [sglang]\ntimeout: 500ms\n"), pods, Options{Client: &http.Client{Transport: stuck}})
	scraper := sources.NewScraper(sources.ScraperConfig{
		Sources: []sources.Source{src.Source}, Sink: src.store, Series: src.store,
		Resolution: time.Second, Timeout: 500 * time.Millisecond, Concurrency: 2,
	})
	for _, tick := range []string{"first tick gives up on it", "next tick skips it while it runs"} {
		scraper.Tick(t.Context())
		if b := src.read(); len(b.Pods) != 1 || b.Pods[0].Name != "ok" {
			t.Fatalf("%s: healthy target lost: %+v", tick, b)
		}
	}
}

// rawStatusServer answers every request on loopback with status line
// "HTTP/1.1 <status>" and no body.
func rawStatusServer(t *testing.T, status string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestCollectBoundsStatusText: a failed target's status text reaches the
// error (and the logs) cut and quoted.
func TestCollectBoundsStatusText(t *testing.T) {
	tests := []struct{ name, status, want string }{
		{"a short status stays whole", "503 Service Unavailable", `"503 Service Unavailable"`},
		{"a long status is cut", "503 " + strings.Repeat("x", 10_000), `"503 ` + strings.Repeat("x", 124) + `..."`},
		{"control characters are quoted", "503 \x1b[2Jgone", `"503 \x1b[2Jgone"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := rawStatusServer(t, tt.status)
			_, errs := newCollector(t, mustParse(t, "presets: [sglang]\n"), podList{vllmPod("p", port, nil)}, Options{}).Collect(t.Context())
			if len(errs) != 1 || errs[0].Reason != "http_status" {
				t.Fatalf("errors = %v, want one http_status", errs)
			}
			msg := errs[0].Err.Error()
			if !strings.HasSuffix(msg, ": "+tt.want) {
				t.Errorf("error = %q, want it to end in %q", msg, tt.want)
			}
		})
	}
}
