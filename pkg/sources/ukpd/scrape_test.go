package ukpd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// kraftletTags are the tags kraftlet writes for default/web-<pod>/app on
// node kraftlet, and extra ones.
func kraftletTags(pod string, extra ...string) []string {
	return append([]string{
		fakeukpd.KraftletTag(fakeukpd.TagNamespace, "default"), fakeukpd.KraftletTag(fakeukpd.TagPod, pod),
		fakeukpd.KraftletTag(fakeukpd.TagContainer, "app"), fakeukpd.KraftletTag(fakeukpd.TagNode, "kraftlet"),
	}, extra...)
}

// kraftletTarget is the target of a source of the env's server that owns
// node kraftlet, whose pods are pods and that requires the tags required.
func (e *env) kraftletTarget(t *testing.T, required []string, pods ...*corev1.Pod) sources.Target {
	t.Helper()
	return oneTarget(t, SourceConfig{
		Endpoints: []EndpointConfig{{URL: e.srv.URL, Nodes: []string{"kraftlet"}}}, Pods: podLister(t, pods...),
		TokenFile: e.tokenFile, CAFile: e.caFile, Clock: e.clk, RequiredTags: required,
	})
}

// TestScrapeSharedAccount has two clusters in one account, both with
// kraftlet's default node name and a pod of the same name: without a
// guard the pod takes the instance started last, whichever cluster it is
// of; with a required tag only this cluster's instance counts.
func TestScrapeSharedAccount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		required []string
		wantCPU  uint64 // of web-0
		ignored  map[string]float64
	}{
		{name: "no guard", wantCPU: 20e9, ignored: map[string]float64{ignoredDuplicate: 1}},
		{name: "required tag", required: []string{"cluster=a"}, wantCPU: 5.5e9, ignored: map[string]float64{ignoredMissingRequired: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			RegisterMetrics()
			e := newEnv(t, nil)
			tg := e.kraftletTarget(t, tc.required, newPod("default", "web-0", "kraftlet", "app"))
			e.add(t, fakeukpd.InstanceSpec{Tags: kraftletTags("web-0", "cluster=a"), CPUCores: 0.5})
			e.clk.Step(time.Second) // the other cluster's pod started later
			e.add(t, fakeukpd.InstanceSpec{Tags: kraftletTags("web-0", "cluster=b"), CPUCores: 2})
			e.clk.Step(10 * time.Second)
			before := counts(t, ignoredInstances, allReasons...)
			if b := scrapeOK(t, tg); len(b.Pods) != 1 || b.Pods[0].Containers[0].CPUCoreNanos != tc.wantCPU {
				t.Errorf("batch = %+v, want web-0 with %d core-ns", b.Pods, tc.wantCPU)
			}
			checkGrowth(t, "ignored", ignoredInstances, before, tc.ignored)
		})
	}
}

// TestScrapeByContainerID: a pod whose container status names an instance
// as its containerID (as kraftlet writes it, "<scheme>://<uuid>") gets that
// instance whatever its tags say, and the conflict is counted; an instance
// whose tags claim that container is not its instance and is left out.
func TestScrapeByContainerID(t *testing.T) {
	RegisterMetrics()
	e := newEnv(t, nil)
	// Mis-tagged: its tags name web-1, while web-0's status names it.
	ours := e.add(t, fakeukpd.InstanceSpec{Tags: kraftletTags("web-1"), CPUCores: 0.5})
	// Tagged for web-0, which runs another instance.
	e.add(t, fakeukpd.InstanceSpec{Tags: kraftletTags("web-0"), CPUCores: 2})
	web0 := newPod("default", "web-0", "kraftlet", "app")
	web0.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "unikraft://" + strings.ToUpper(ours.UUID)}}
	tg := e.kraftletTarget(t, nil, web0, newPod("default", "web-1", "kraftlet", "app"))
	e.clk.Step(10 * time.Second)
	before := counts(t, ignoredInstances, allReasons...)
	conflicts := counter(t, tagConflicts)
	if b := scrapeOK(t, tg); len(b.Pods) != 1 || b.Pods[0].Name != "web-0" || b.Pods[0].Containers[0].CPUCoreNanos != 5e9 {
		t.Errorf("batch = %+v, want web-0 alone with its own instance's 5e9 core-ns", b.Pods)
	}
	checkGrowth(t, "ignored (the forged instance as other_instance)", ignoredInstances, before, map[string]float64{ignoredOtherInstance: 1})
	if got := counter(t, tagConflicts) - conflicts; got != 1 {
		t.Errorf("tag conflicts grew by %v, want 1", got)
	}
}

// TestScrapeIgnoredContainer checks that a container kraftlet runs no
// instance for reads zero, so its pod is complete.
func TestScrapeIgnoredContainer(t *testing.T) {
	pod := newPod("default", "web-0", "kraftlet-a", "app", "mesh", "log")
	pod.Annotations = map[string]string{IgnoreAnnotation: "mesh, log,not-a-container"}
	e := newScrapeEnv(t, FormatJSON, nil, pod)
	e.addWeb(t, 0.5, 1<<20)
	e.clk.Step(10 * time.Second)
	now := t0.Add(10 * time.Second)
	b := e.scrape(t)
	if len(b.Pods) != 1 {
		t.Fatalf("pods = %+v, want web-0", b.Pods)
	}
	checkDiff(t, "containers", []sources.ContainerPoint{
		{Name: "app", Point: sources.Point{Timestamp: now, StartTime: t0, CPUCoreNanos: 5e9, MemoryBytes: 1 << 20}},
		{Name: "log", Point: sources.Point{Timestamp: now, StartTime: t0}},
		{Name: "mesh", Point: sources.Point{Timestamp: now, StartTime: t0}},
	}, b.Pods[0].Containers)
}

// TestScrapeDataFaults gives the fake ukpd each fault a scrape survives and
// follows a pod from the scrape through the store: it is served with the
// values the fake was told, never higher, and the instances left out are
// counted. ClockBackwards is TestScrapeStartedAtMovesAlone's.
func TestScrapeDataFaults(t *testing.T) {
	const (
		cycle = 15 * time.Second
		cpu   = 40_000_000 // nanocores of each container
		mem   = 64 << 20
	)
	tests := []struct {
		name  string
		fault fakeukpd.Fault
		// reset says the fault sets the counters back: the first rate
		// after it may read low.
		reset bool
		// ignored is how many instances each scrape leaves out, by reason.
		ignored map[string]float64
	}{
		// The counter starts from zero with a new start count and the same
		// started_at.
		{name: "counter reset", fault: fakeukpd.Fault{Kind: fakecore.FaultCounterReset}, reset: true},
		// A second instance for every container, with twice the values.
		{name: "duplicate instances", fault: fakeukpd.Fault{Kind: fakeukpd.FaultDuplicateInstances}, ignored: map[string]float64{ignoredDuplicate: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newScrapeEnv(t, FormatJSON, nil, newPod("default", "web-0", "kraftlet-a", "app", "sidecar"))
			for _, c := range []string{"app", "sidecar"} {
				e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "web-0", Container: c, Node: "kraftlet-a", CPUCores: cpu / 1e9, RSSBytes: mem})
			}
			st := newStore(e.env, 2*cycle, 4*cycle)
			// scrape returns the counter of the first container.
			scrape := func() uint64 {
				t.Helper()
				e.clk.Step(cycle)
				b := e.scrape(t)
				if len(b.Pods) != 1 {
					t.Fatalf("pods %+v, want web-0", b.Pods)
				}
				st.Store(SourceName, e.target.Nodes(), b, e.clk.Now())
				return b.Pods[0].Containers[0].CPUCoreNanos
			}
			scrape()
			before := scrape()
			must(t, e.fake.SetFault(tc.fault))
			for i := range 4 {
				ignoredBefore := counts(t, ignoredInstances, allReasons...)
				if counter := scrape(); i == 0 && (counter < before) != tc.reset {
					t.Errorf("CPU counter went from %d to %d over the fault", before, counter)
				}
				checkGrowth(t, fmt.Sprintf("scrape %d: ignored", i), ignoredInstances, ignoredBefore, tc.ignored)
				for _, c := range webUsage(t, st, fmt.Sprintf("scrape %d", i)).Containers {
					low := tc.reset && i == 0 && c.CPUNanoCores < cpu
					if (c.CPUNanoCores != cpu && !low) || c.MemoryBytes != mem {
						t.Errorf("scrape %d: %s served %+v, want %d nanocores and %d bytes", i, c.Name, c.Usage, cpu, mem)
					}
				}
			}
		})
	}
}

// largeAccount is an account of n running instances, one per pod of the
// kraftlet node, on a fake ukpd that mod configures, and its target, ten
// seconds after the instances started.
func largeAccount(t *testing.T, n int, mod func(*fakeukpd.Config)) (*env, sources.Target) {
	t.Helper()
	e := newEnv(t, mod)
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		name := fmt.Sprintf("web-%04d", i)
		pods = append(pods, newPod("default", name, "kraftlet", "app"))
		e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: name, Container: "app", Node: "kraftlet", CPUCores: 0.1})
	}
	tg := e.kraftletTarget(t, nil, pods...)
	e.clk.Step(10 * time.Second)
	return e, tg
}

// TestScrapeServerIgnoringFrom: a server that pages by count but ignores
// from answers the first page again for the second; the list is then read
// once without pagination, and the scrape is partial with an error that
// says why, never one page passed off as the whole account.
func TestScrapeServerIgnoringFrom(t *testing.T) {
	const n = 150
	tests := []struct {
		name               string
		pageSize, wantPods int
	}{
		{"without a page size, the one read holds every instance", 0, n},
		{"with one, only its first page, and the error says so", 100, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, tg := largeAccount(t, n, func(c *fakeukpd.Config) { c.PageSize, c.IgnoreFrom = tt.pageSize, true })
			b, err := tg.Scrape(t.Context())
			if b == nil || len(b.Pods) != tt.wantPods {
				t.Fatalf("scrape = %v, %v; want %d pods", b, err, tt.wantPods)
			}
			if err == nil || !strings.Contains(err.Error(), "does not page by from") {
				t.Errorf("error = %v, want one that says the server does not page", err)
			}
			// The two pages, then the one read without pagination.
			if got := e.fake.ListRequests(); got != 3 {
				t.Errorf("%d list requests, want 3", got)
			}
		})
	}
}

// TestScrapePagesTheList checks a large account on a server that answers
// at most 100 instances a request: every pod gets its metrics, from one
// read of the list in pages.
func TestScrapePagesTheList(t *testing.T) {
	const n = 2000
	RegisterMetrics()
	e, tg := largeAccount(t, n, func(c *fakeukpd.Config) { c.PageSize = 100 })
	if b := scrapeOK(t, tg); len(b.Pods) != n {
		t.Errorf("scrape has %d pods, want %d", len(b.Pods), n)
	}
	// from is inclusive: a page of 100 after the first adds 99. 100 + 20 ×
	// 99 covers 2,000, and one more page holds only the last instance again.
	if got := e.fake.ListRequests(); got != 22 {
		t.Errorf("%d list requests, want 22", got)
	}
}
