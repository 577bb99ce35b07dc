package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

var now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fakeUsage answers from maps keyed by "ns/name" and node name.
type fakeUsage struct {
	pods  map[string]store.PodUsage
	nodes map[string]store.Usage
}

func (f *fakeUsage) Pod(namespace, name, _, node string, _ store.PodRef) (store.PodUsage, store.PodRef, *store.Unavailable) {
	if u, ok := f.pods[namespace+"/"+name]; ok {
		return u, store.PodRef{}, nil
	}
	return store.PodUsage{}, store.PodRef{}, &store.Unavailable{Reason: "node " + node + " did not report it"}
}

// Generation never moves: the fake's usage carries no FreshUntil, so the
// provider keeps no snapshot of it and reads it again at every list.
func (f *fakeUsage) Generation() uint64 { return 0 }

func (f *fakeUsage) Node(name string) (store.Usage, *store.Unavailable) {
	if u, ok := f.nodes[name]; ok {
		return u, nil
	}
	return store.Usage{}, &store.Unavailable{Reason: "node " + name + " has not been scraped yet"}
}

func testPod(ns, name, node string, phase corev1.PodPhase, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), Labels: lbls},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
}

// podIndex is a pod cache of pods.
func podIndex(pods ...*corev1.Pod) *podcache.PodIndex {
	idx := podcache.NewPodIndex()
	for _, p := range pods {
		idx.Set(podcache.NewPod(p))
	}
	return idx
}

func usage(cpuNano, mem uint64) store.PodUsage {
	return store.PodUsage{Timestamp: now.Add(-5 * time.Second), Window: 15 * time.Second, Containers: []store.ContainerUsage{
		{Name: "c", Usage: store.Usage{Timestamp: now.Add(-5 * time.Second), Window: 15 * time.Second, CPUNanoCores: cpuNano, MemoryBytes: mem}},
	}}
}

func newTestProvider(t *testing.T) *Provider {
	t.Helper()
	pods := podIndex(
		testPod("a", "web-1", "n1", corev1.PodRunning, map[string]string{"app": "web"}),
		testPod("a", "web-2", "n1", corev1.PodRunning, map[string]string{"app": "web"}),
		testPod("a", "db", "n2", corev1.PodRunning, map[string]string{"app": "db"}),
		testPod("b", "web-1", "n2", corev1.PodRunning, map[string]string{"app": "web"}),
		testPod("b", "pending", "", corev1.PodPending, nil),
		testPod("b", "starting", "n2", corev1.PodPending, nil),
		testPod("b", "nodata", "n2", corev1.PodRunning, nil),
	)
	nodes := podcache.NewNodeIndex()
	for _, n := range []string{"n1", "n2", "n3"} {
		nodes.Set(podcache.NewNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": map[string]string{"n1": "x", "n2": "x", "n3": "y"}[n]}}}))
	}
	return New(Config{Pods: pods, Nodes: nodes, Clock: clocktesting.NewFakeClock(now), Usage: &fakeUsage{
		pods: map[string]store.PodUsage{
			"a/web-1": usage(250_000_000, 100<<20), "a/web-2": usage(1, 1), "a/db": usage(2, 2), "b/web-1": usage(3, 3),
			"b/starting": usage(4, 4), // must stay hidden: not running
		},
		nodes: map[string]store.Usage{"n1": {Timestamp: now, Window: 15 * time.Second, CPUNanoCores: 1_500_000_000, MemoryBytes: 4 << 30}, "n2": {Timestamp: now, Window: 15 * time.Second}},
	}})
}

func TestGetPodMetrics(t *testing.T) {
	p := newTestProvider(t)
	got, err := p.GetPodMetrics(context.Background(), "a", "web-1")
	must(t, err)
	want := &metricsapi.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "a", Labels: map[string]string{"app": "web"}, CreationTimestamp: metav1.NewTime(now)},
		Timestamp:  metav1.NewTime(now.Add(-5 * time.Second)), Window: metav1.Duration{Duration: 15 * time.Second},
		Containers: []metricsapi.ContainerMetrics{{Name: "c",
			Usage: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("100Mi")}}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("GetPodMetrics (-want +got):\n%s", diff)
	}
}

func TestGetPodMetricsNotFound(t *testing.T) {
	p := newTestProvider(t)
	tests := []struct{ ns, name, want string }{
		{"a", "missing", `podmetrics.metrics.k8s.io "missing" not found`},
		{"b", "pending", "not scheduled to a node"},
		{"b", "starting", "the pod is Pending; only running pods have metrics"},
		{"b", "nodata", "node n2 did not report it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.GetPodMetrics(context.Background(), tc.ns, tc.name)
			if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a NotFound containing %q", err, tc.want)
			}
		})
	}
}

func TestListPodMetrics(t *testing.T) {
	p := newTestProvider(t)
	tests := []struct {
		name, ns, labels, fields string
		want                     []string
	}{
		{name: "all namespaces", want: []string{"a/db", "a/web-1", "a/web-2", "b/web-1"}},
		{name: "one namespace", ns: "a", want: []string{"a/db", "a/web-1", "a/web-2"}},
		{name: "label selector as the HPA sends", ns: "a", labels: "app=web", want: []string{"a/web-1", "a/web-2"}},
		{name: "label selector across namespaces", labels: "app=web", want: []string{"a/web-1", "a/web-2", "b/web-1"}},
		{name: "field selector on name", fields: "metadata.name=web-1", want: []string{"a/web-1", "b/web-1"}},
		{name: "field selector on namespace", fields: "metadata.namespace=b", want: []string{"b/web-1"}},
		{name: "field selector excluding a name", ns: "a", fields: "metadata.name!=db", want: []string{"a/web-1", "a/web-2"}},
		{name: "nothing matches", ns: "c", want: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := fields.ParseSelector(tc.fields)
			must(t, err)
			items, err := p.ListPodMetrics(context.Background(), tc.ns, selector(t, tc.labels), fs)
			must(t, err)
			got := []string{}
			for _, m := range items {
				got = append(got, m.Namespace+"/"+m.Name)
			}
			// In the order served: by namespace, then name.
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListPodMetrics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeMetrics(t *testing.T) {
	p := newTestProvider(t)
	m, err := p.GetNodeMetrics(context.Background(), "n1")
	must(t, err)
	if cpu := cpuMilli(m.Usage); cpu != 1500 {
		t.Errorf("n1 CPU = %dm, want 1500m", cpu)
	}
	if _, err := p.GetNodeMetrics(context.Background(), "n3"); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "not been scraped") {
		t.Errorf("n3: err = %v, want NotFound saying why", err)
	}
	if _, err := p.GetNodeMetrics(context.Background(), "n9"); !apierrors.IsNotFound(err) {
		t.Errorf("n9: err = %v, want NotFound", err)
	}
	items, err := p.ListNodeMetrics(context.Background(), selector(t, "zone=x"), fields.Everything())
	must(t, err)
	var names []string
	for _, n := range items {
		names = append(names, n.Name)
	}
	if diff := cmp.Diff([]string{"n1", "n2"}, names); diff != "" {
		t.Errorf("ListNodeMetrics zone=x (-want +got):\n%s", diff)
	}
}

// TestShapedOncePerSample: every read of one sample shares the containers
// shaped at the first, a new scrape shapes them again, and a pod replaced
// in the cache is forgotten.
func TestShapedOncePerSample(t *testing.T) {
	clk := clocktesting.NewFakeClock(now)
	st := store.New(store.Config{Clock: clk, Sources: []string{"kubelet"}, FirstWindowMax: time.Minute, StaleAfter: time.Minute})
	scrape := func(cpu uint64) {
		point := sources.Point{Timestamp: clk.Now(), StartTime: now.Add(-10 * time.Second), CPUCoreNanos: cpu, MemoryBytes: 1}
		pod := sources.PodPoint{Namespace: "a", Name: "web-1", UID: "web-1-uid", Node: "n1", Containers: []sources.ContainerPoint{{Name: "c", Point: point}}}
		st.Store("kubelet", []string{"n1"}, &sources.Batch{Pods: []sources.PodPoint{pod}}, clk.Now())
	}
	pods := podIndex(testPod("a", "web-1", "n1", corev1.PodRunning, nil))
	p := New(Config{Pods: pods, Nodes: podcache.NewNodeIndex(), Usage: st, Clock: clk})
	get := func() *metricsapi.PodMetrics {
		t.Helper()
		m, err := p.GetPodMetrics(context.Background(), "a", "web-1")
		must(t, err)
		return m
	}
	scrape(5e9)
	first, again := get(), get()
	if &first.Containers[0] != &again.Containers[0] {
		t.Error("two reads of one sample shaped the containers twice")
	}
	clk.Step(15 * time.Second)
	scrape(8e9)
	next := get()
	if &next.Containers[0] == &first.Containers[0] {
		t.Error("a new sample was served with the old shape")
	}
	if cpu := cpuMilli(next.Containers[0].Usage); cpu != 200 {
		t.Errorf("CPU after the second scrape = %dm, want 200m", cpu)
	}
	pods.Set(podcache.NewPod(testPod("a", "web-1", "n1", corev1.PodRunning, map[string]string{"v": "2"})))
	if replaced := get(); &replaced.Containers[0] == &next.Containers[0] {
		t.Error("a replaced pod was served with its predecessor's shape")
	}
}

// TestPartialPodNotServed: a pod is served only when every container its
// spec runs has usage (finding 4 on the read side; any source).
func TestPartialPodNotServed(t *testing.T) {
	pod := testPod("a", "two", "n1", corev1.PodRunning, nil)
	pod.Spec.Containers = []corev1.Container{{Name: "app"}, {Name: "log"}}
	u := usage(1, 1)
	u.Containers[0].Name = "app"
	p := newGroupProvider([]*corev1.Pod{pod}, map[string]store.PodUsage{"a/two": u}, group.PolicyPod)
	_, err := p.GetPodMetrics(context.Background(), "a", "two")
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `container "log"`) {
		t.Errorf("get: %v, want NotFound naming container log", err)
	}
	list, err := p.ListPodMetrics(context.Background(), "a", labels.Everything(), fields.Everything())
	must(t, err)
	if len(list) != 0 {
		t.Errorf("list = %v, want none", list)
	}
}

// selector parses s, "" as everything.
func selector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	must(t, err)
	return sel
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
