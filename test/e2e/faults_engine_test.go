//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
)

// faultOutcome is what a fault must do to the metrics of the pods it touches.
type faultOutcome int

const (
	// faultGone: the pods keep their last right values, then disappear within the staleness bound.
	faultGone        faultOutcome = iota
	faultRightOrGone              // the pods are served with right values or not at all, never with wrong ones
	// faultDropped: the pods of faultCase.dropped disappear by the next scrape; the others keep right values.
	faultDropped
)

// faultCase is one fault of a fault table.
type faultCase struct {
	name       string
	set, clear func() error
	reason     string   // the failure reason the fault is counted under; empty when the scrape succeeds
	partial    bool     // the fault is counted as a partial scrape
	counter    []string // another self-metric the fault must increase: name and label matchers
	outcome    faultOutcome
	dropped    map[string]bool
}

// faultScope is where a fault table's faults land: affected are the pods the fault touches, healthy the pods
// that must keep fresh samples throughout, told each pod's usage as the fakes were told.
type faultScope struct {
	source            string // "kubelet" or "ukpd"
	target            string // the target ID in the server's log
	ns                string
	affected, healthy []string
	told              map[string]faultSample
	tolerance         float64 // the relative CPU difference accepted
}

// faultFigures are what one fault case measured; zero durations were not measured. served and lists count the
// lists that served an affected pod, of all the lists taken while the fault was in force.
type faultFigures struct {
	counted, gone, recovered, healthyMaxAge time.Duration
	served, lists                           int
}

// faultBounds derive every wait of a fault case from the server's resolution and request timeout.
type faultBounds struct {
	counted time.Duration // two failed scrapes, as TestNodeFaults always waited
	gone    time.Duration // a scrape in flight at the fault, then staleness
	dropped time.Duration // the next scrape
	window  time.Duration // how long "right" outcomes are watched
	recover time.Duration
	age     time.Duration // oldest sample of a healthy pod
}

func newFaultBounds() faultBounds {
	res, timeout, stale := suite.resolution, suite.timeout, staleBound()
	const slack = 10 * time.Second
	return faultBounds{
		counted: 3*(res+timeout) + slack, gone: timeout + stale + res + slack, dropped: 2*(res+timeout) + slack,
		window: 3 * res, recover: res + timeout + 2*slack,
		// Samples carry whole seconds; a second more covers that and a list's latency.
		age: stale + time.Second,
	}
}

// removes says whether the fault's pods (or some of them) must disappear.
func (tc faultCase) removes() bool { return tc.outcome == faultGone || tc.outcome == faultDropped }

// counts says whether the fault must move a self-metric.
func (tc faultCase) counts() bool { return tc.reason != "" || tc.partial || tc.counter != nil }

// faultCounters reads the self-metrics a fault may move: the failures under its reason, the partial scrapes,
// and its counter.
func faultCounters(ctx context.Context, t *testing.T, sc faultScope, tc faultCase) (c [3]float64) {
	source, reason := `source="`+sc.source+`"`, `reason="`+tc.reason+`"`
	c[0] = mustMetric(ctx, t, suite.server, "group_metrics_server_scraper_target_failures_total", source, reason)
	c[1] = mustMetric(ctx, t, suite.server, "group_metrics_server_scraper_partial_scrapes_total", source)
	if tc.counter != nil {
		c[2] = mustMetric(ctx, t, suite.server, tc.counter[0], tc.counter[1:]...)
	}
	return c
}

// faultLog counts the server's log lines saying target started failing for reason (for any reason if reason
// is empty), recovered, and started leaving out malformed points.
func faultLog(t *testing.T, target, reason string) (n [3]int) {
	t.Helper()
	log := string(readFile(t, suite.server.Process.LogPath()))
	target = `target="` + target + `"`
	failing := []string{target, `"Scrape target failing"`}
	if reason != "" {
		failing = append(failing, `reason="`+reason+`"`)
	}
	for i, words := range [][]string{
		failing, {target, `"Scrape target recovered"`}, {target, `"Scrape target leaving out malformed points"`},
	} {
		n[i] = len(matchingLines(log, words...))
	}
	return n
}

// runFault sets one fault, watches the pods and the server until the fault's effects are all seen (or a bound
// passes), checks readiness, the process and the log, clears the fault and waits for recovery.
func runFault(ctx context.Context, t *testing.T, sc faultScope, tc faultCase) {
	t.Helper()
	b := newFaultBounds()
	pid := suite.server.Process.Pid()
	before, logBefore := faultCounters(ctx, t, sc, tc), faultLog(t, sc.target, tc.reason)
	counted := func() bool {
		c := faultCounters(ctx, t, sc, tc)
		return tc.counts() && (tc.reason == "" || c[0] >= before[0]+2) && (!tc.partial || c[1] > before[1]) &&
			(tc.counter == nil || c[2] > before[2])
	}
	must(t, tc.set())
	clearOnce := sync.OnceValue(tc.clear)
	t.Cleanup(func() { _ = clearOnce() })
	fig := watchFault(ctx, t, sc, tc, b, counted)
	checkServerUp(ctx, t, pid)
	log := faultLog(t, sc.target, tc.reason)
	if n, want := log[0]-logBefore[0], btoi(tc.reason != ""); n != want {
		t.Errorf("log has %d new \"Scrape target failing\" lines for %s reason %q, want %d", n, sc.target, tc.reason, want)
	}
	if n := log[2] - logBefore[2]; tc.partial && n != 1 {
		t.Errorf("log has %d new lines saying %s leaves out points, want 1", n, sc.target)
	}

	must(t, clearOnce())
	clearedAt := time.Now()
	must(t, pollBounded(ctx, b.recover, "recovery from "+tc.name, func(ctx context.Context) error {
		if tc.reason != "" && faultLog(t, sc.target, tc.reason)[1] <= logBefore[1] {
			return fmt.Errorf("no new recovery line for %s", sc.target)
		}
		return faultAllRight(ctx, sc, clearedAt)
	}))
	if tc.removes() {
		fig.recovered = time.Since(clearedAt)
	}
	checkServerUp(ctx, t, pid)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	t.Logf("fault %s (%s): counted %v, gone %v, recovered %v (0s: not measured), affected pods served in %d of %d lists, healthy pods' oldest sample %v",
		tc.name, sc.target, r(fig.counted), r(fig.gone), r(fig.recovered), fig.served, fig.lists, r(fig.healthyMaxAge))
}

// watchFault lists the pods every half second, from the moment the fault is set, until it is counted, its
// pods are gone as its outcome says, the healthy pods are fresh and a "right" outcome was watched long
// enough; then it checks what the lists saw.
func watchFault(ctx context.Context, t *testing.T, sc faultScope, tc faultCase, b faultBounds, counted func() bool) faultFigures {
	t.Helper()
	w := faultWatch{sc: sc, tc: tc, setAt: time.Now()}
	limit := b.window
	switch {
	case tc.outcome == faultGone:
		limit = max(b.counted, b.gone)
	case tc.outcome == faultDropped:
		limit = max(b.counted, b.dropped)
	case tc.reason != "" || tc.partial:
		limit = max(limit, b.counted)
	}
	var fig faultFigures
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		now := time.Now()
		w.observe(ctx)
		if fig.counted == 0 && counted() {
			fig.counted = time.Since(w.setAt)
		}
		if fig.gone == 0 && w.gone && tc.removes() {
			fig.gone = time.Since(w.setAt)
		}
		countedOK := fig.counted > 0 || !tc.counts()
		goneOK := fig.gone > 0 || !tc.removes()
		if countedOK && goneOK && (tc.removes() || now.Sub(w.setAt) >= b.window) && w.healthyFresh {
			break
		}
		if now.After(w.setAt.Add(limit)) {
			t.Fatalf("after %v: counted %v, gone %v, healthy pods fresh %v; wrong values: %v; last list: %s",
				limit, fig.counted > 0, fig.gone > 0, w.healthyFresh, w.wrong[:min(3, len(w.wrong))], w.last)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-ticker.C:
		}
	}
	fig.healthyMaxAge, fig.served, fig.lists = w.maxAge, w.served, w.lists
	if w.missing > 0 || w.maxAge > b.age {
		t.Errorf("healthy pods: oldest sample %v (bound %v), missing from %d lists", w.maxAge, b.age, w.missing)
	}
	for _, e := range w.wrong {
		t.Error(e)
	}
	if tc.outcome == faultGone && fig.gone > b.gone {
		t.Errorf("pods disappeared after %v, bound %v", fig.gone, b.gone)
	}
	return fig
}

// faultWatch lists the pods' metrics and keeps what a fault case checks.
type faultWatch struct {
	sc    faultScope
	tc    faultCase
	setAt time.Time

	healthyFresh, gone     bool
	maxAge                 time.Duration
	missing, served, lists int
	wrong                  []string
	last                   string
}

func (w *faultWatch) observe(ctx context.Context) {
	served, err := listServed(ctx, w.sc.ns)
	now := time.Now()
	if err != nil {
		w.last = err.Error()
		return
	}
	var desc []string
	for _, p := range slices.Sorted(maps.Keys(served)) {
		s := served[p]
		desc = append(desc, fmt.Sprintf("%s=%dm/%d@%s", p, s.milliCPU, s.memory, s.at.Format(time.TimeOnly)))
	}
	w.last = strings.Join(desc, " ")
	w.lists++
	wrong := func(format string, args ...any) {
		w.wrong = append(w.wrong, now.Sub(w.setAt).Round(time.Millisecond).String()+" after the fault: "+fmt.Sprintf(format, args...))
	}
	for p := range served {
		if _, ok := w.sc.told[p]; !ok {
			wrong("pod %s served, but no fake was told of it", p)
		}
	}
	w.healthyFresh = true
	for _, p := range w.sc.healthy {
		s, ok := served[p]
		if !ok {
			w.missing++
			w.healthyFresh = false
			continue
		}
		w.maxAge = max(w.maxAge, now.Sub(s.at))
		w.healthyFresh = w.healthyFresh && s.at.After(w.setAt)
	}
	gone, seen := true, false
	for _, p := range w.sc.affected {
		s, ok := served[p]
		seen = seen || ok
		expectGone := w.tc.outcome == faultGone || (w.tc.outcome == faultDropped && w.tc.dropped[p])
		switch {
		case ok && expectGone:
			gone = false
		case !ok && w.tc.outcome == faultDropped && !w.tc.dropped[p]:
			wrong("pod %s missing", p)
		}
		if err := faultCheckValue(w.sc, p, s); ok && err != nil {
			wrong("%v", err)
		}
	}
	w.gone = gone
	w.served += btoi(seen)
}

// faultSample is a pod's CPU and memory, as told to a fake or as served with the time it was sampled.
type faultSample struct {
	at               time.Time
	milliCPU, memory int64
}

// listServed lists the pods of ns as the metrics API serves them, by name.
func listServed(ctx context.Context, ns string) (map[string]faultSample, error) {
	metrics, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	if err != nil {
		return nil, err
	}
	list, err := metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	served := map[string]faultSample{}
	for _, m := range list.Items {
		s := faultSample{at: m.Timestamp.Time}
		for _, c := range m.Containers {
			s.milliCPU += c.Usage.Cpu().MilliValue()
			s.memory += c.Usage.Memory().Value()
		}
		served[m.Name] = s
	}
	return served, nil
}

// faultCheckValue says whether a served value is what the fakes were told; a pod no fake was told of is an
// error.
func faultCheckValue(sc faultScope, pod string, s faultSample) error {
	want, ok := sc.told[pod]
	if !ok {
		return fmt.Errorf("pod %s served, but no fake was told of it", pod)
	}
	d := float64(s.milliCPU-want.milliCPU) / float64(want.milliCPU)
	if s.memory != want.memory || d > sc.tolerance || d < -sc.tolerance || s.milliCPU < 0 {
		return fmt.Errorf("pod %s served %dm and %d bytes; the fake was told %dm and %d bytes",
			pod, s.milliCPU, s.memory, want.milliCPU, want.memory)
	}
	return nil
}

// faultAllRight checks that every pod of the scope is served with right values sampled after since, and no
// other pod.
func faultAllRight(ctx context.Context, sc faultScope, since time.Time) error {
	served, err := listServed(ctx, sc.ns)
	if err != nil {
		return err
	}
	for p := range served {
		if _, ok := sc.told[p]; !ok {
			return fmt.Errorf("pod %s served, but no fake was told of it", p)
		}
	}
	for _, p := range slices.Concat(sc.affected, sc.healthy) {
		s, ok := served[p]
		if !ok {
			return fmt.Errorf("pod %s has no metrics", p)
		}
		if !s.at.After(since.Add(-time.Second)) {
			return fmt.Errorf("pod %s: sample of %s, not newer than %s", p, s.at.Format(time.TimeOnly), since.Format(time.TimeOnly))
		}
		if err := faultCheckValue(sc, p, s); err != nil {
			return err
		}
	}
	return nil
}

// createPinnedPods creates one pod per name, bound to node, with one container requesting 10m CPU, and waits
// until they run.
func createPinnedPods(ctx context.Context, t *testing.T, ns, node string, names ...string) {
	t.Helper()
	ctr := corev1.Container{
		Name: "app", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
	}
	var pods []*corev1.Pod
	for _, name := range names {
		pods = append(pods, kwokPod(ns, name, node, map[string]string{"app": "faults", "node": node}, ctr))
	}
	createPods(ctx, t, 2*time.Minute, watched(), pods...)
}
