//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
)

// faultOutcome is what a fault must do to the metrics of the pods it
// touches.
type faultOutcome int

const (
	// faultGone: the pods keep their last right values, then disappear
	// within the staleness bound.
	faultGone faultOutcome = iota
	// faultRightOrGone: the pods are served with right values or not at
	// all, never with wrong ones.
	faultRightOrGone
	// faultDropped: the pods of faultCase.dropped disappear by the next
	// scrape; the other pods keep right values.
	faultDropped
)

// faultCase is one fault of a fault table.
type faultCase struct {
	name       string
	set, clear func() error
	// reason is the failure reason the fault is counted under; empty when
	// the scrape succeeds.
	reason string
	// partial says the fault is counted as a partial scrape.
	partial bool
	// counter, when set, is another self-metric the fault must increase:
	// name and label matchers.
	counter []string
	outcome faultOutcome
	dropped map[string]bool
}

// faultScope is where a fault table's faults land.
type faultScope struct {
	source string // "kubelet" or "ukpd"
	target string // the target ID in the server's log
	ns     string
	// affected are the pods the fault touches, healthy the pods that must
	// keep fresh samples throughout.
	affected, healthy []string
	// told is each pod's usage as the fakes were told.
	told map[string]faultSample
	// tolerance is the relative CPU difference accepted.
	tolerance float64
}

// faultFigures are what one fault case measured. Zero durations were not
// measured.
type faultFigures struct {
	counted, gone, recovered time.Duration
	healthyMaxAge            time.Duration
	// served and lists count the lists that served an affected pod, of all
	// the lists taken while the fault was in force.
	served, lists int
}

func (f faultFigures) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("counted %v, gone %v, recovered %v (0s: not measured), affected pods served in %d of %d lists, healthy pods' oldest sample %v",
		r(f.counted), r(f.gone), r(f.recovered), f.served, f.lists, r(f.healthyMaxAge))
}

// faultBounds derive every wait of a fault case from the server's
// resolution and request timeout.
type faultBounds struct {
	stale   time.Duration // values are served this long after they were derived
	counted time.Duration // two failed scrapes, as TestNodeFaults always waited
	gone    time.Duration // a scrape in flight at the fault, then staleness
	dropped time.Duration // the next scrape
	window  time.Duration // how long "right" outcomes are watched
	recover time.Duration
	age     time.Duration // oldest sample of a healthy pod
}

func newFaultBounds() faultBounds {
	res, timeout := suite.resolution, suite.timeout
	const slack = 10 * time.Second
	stale := 2*res + timeout
	return faultBounds{
		stale:   stale,
		counted: 3*(res+timeout) + slack,
		gone:    timeout + stale + res + slack,
		dropped: 2*(res+timeout) + slack,
		window:  3 * res,
		recover: res + timeout + 2*slack,
		// Samples carry whole seconds; a second more covers that and a
		// list's latency.
		age: stale + time.Second,
	}
}

// removes says whether the fault's pods (or some of them) must disappear.
func (tc faultCase) removes() bool { return tc.outcome == faultGone || tc.outcome == faultDropped }

// faultCounted says whether the server counted the fault as it should.
func faultCounted(ctx context.Context, t *testing.T, sc faultScope, tc faultCase, failures, partial, counter float64) bool {
	if tc.reason != "" && mustMetric(ctx, t, suite.server, "group_metrics_server_scraper_target_failures_total", `source="`+sc.source+`"`, `reason="`+tc.reason+`"`) < failures+2 {
		return false
	}
	if tc.partial && mustMetric(ctx, t, suite.server, "group_metrics_server_scraper_partial_scrapes_total", `source="`+sc.source+`"`) <= partial {
		return false
	}
	if tc.counter != nil && mustMetric(ctx, t, suite.server, tc.counter[0], tc.counter[1:]...) <= counter {
		return false
	}
	return tc.reason != "" || tc.partial || tc.counter != nil
}

// runFault sets one fault, watches the pods and the server until the
// fault's effects are all seen (or a bound passes), checks readiness, the
// process and the log, clears the fault and waits for recovery.
func runFault(ctx context.Context, t *testing.T, sc faultScope, tc faultCase) faultFigures {
	t.Helper()
	b := newFaultBounds()
	pid := suite.server.Process.Pid()
	failures := mustMetric(ctx, t, suite.server, "group_metrics_server_scraper_target_failures_total", `source="`+sc.source+`"`, `reason="`+tc.reason+`"`)
	partial := mustMetric(ctx, t, suite.server, "group_metrics_server_scraper_partial_scrapes_total", `source="`+sc.source+`"`)
	var counter float64
	if tc.counter != nil {
		counter = mustMetric(ctx, t, suite.server, tc.counter[0], tc.counter[1:]...)
	}
	counted := func() bool { return faultCounted(ctx, t, sc, tc, failures, partial, counter) }
	failingBefore, recoveredBefore := faultLogLines(t, sc.target, tc.reason)
	partialLinesBefore := partialLogLines(t, sc.target)

	must(t, tc.set())
	cleared := false
	t.Cleanup(func() {
		if !cleared {
			_ = tc.clear()
		}
	})
	fig := watchFault(ctx, t, sc, tc, b, counted)
	checkServerUp(ctx, t, pid)
	failing, _ := faultLogLines(t, sc.target, tc.reason)
	switch {
	case tc.reason != "" && failing != failingBefore+1:
		t.Errorf("log has %d new \"Scrape target failing\" lines for %s reason %s, want 1", failing-failingBefore, sc.target, tc.reason)
	case tc.reason == "" && failing != failingBefore:
		t.Errorf("log has %d new \"Scrape target failing\" lines for %s, want none", failing-failingBefore, sc.target)
	}
	if n := partialLogLines(t, sc.target) - partialLinesBefore; tc.partial && n != 1 {
		t.Errorf("log has %d new lines saying %s leaves out points, want 1", n, sc.target)
	}

	must(t, tc.clear())
	cleared = true
	clearedAt := time.Now()
	must(t, poll(ctx, "recovery from "+tc.name, func(ctx context.Context) error {
		if time.Since(clearedAt) > b.recover {
			return fmt.Errorf("still not recovered after %v", b.recover)
		}
		if tc.reason != "" {
			if _, recovered := faultLogLines(t, sc.target, tc.reason); recovered <= recoveredBefore {
				return fmt.Errorf("no new recovery line for %s", sc.target)
			}
		}
		return faultAllRight(ctx, sc, clearedAt)
	}))
	if tc.removes() {
		fig.recovered = time.Since(clearedAt)
	}
	checkServerUp(ctx, t, pid)
	t.Logf("fault %s (%s): %s", tc.name, sc.target, fig)
	return fig
}

// watchFault lists the pods every half second, from the moment the fault
// is set, until it is counted, its pods are gone as its outcome says, the
// healthy pods are fresh and a "right" outcome was watched long enough;
// then it checks what the lists saw.
func watchFault(ctx context.Context, t *testing.T, sc faultScope, tc faultCase, b faultBounds, counted func() bool) faultFigures {
	t.Helper()
	setAt := time.Now()
	mc, err := newMetricsClient(suite.cluster.RESTConfig())
	must(t, err)
	w := faultWatch{metrics: mc, sc: sc, tc: tc, setAt: setAt}
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
			fig.counted = time.Since(setAt)
		}
		if fig.gone == 0 && w.gone && tc.removes() {
			fig.gone = time.Since(setAt)
		}
		countedOK := fig.counted > 0 || (tc.reason == "" && !tc.partial && tc.counter == nil)
		goneOK := fig.gone > 0 || !tc.removes()
		watchedOK := tc.removes() || now.Sub(setAt) >= b.window
		if countedOK && goneOK && watchedOK && w.healthyFresh {
			break
		}
		if now.After(setAt.Add(limit)) {
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
	metrics metricsclient.Interface
	sc      faultScope
	tc      faultCase
	setAt   time.Time

	healthyFresh  bool
	gone          bool
	maxAge        time.Duration
	missing       int
	served, lists int
	wrong         []string
	last          string
}

func (w *faultWatch) observe(ctx context.Context) {
	served, err := listServed(ctx, w.metrics, w.sc.ns)
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
		if !ok {
			continue
		}
		if err := faultCheckValue(w.sc, p, s); err != nil {
			wrong("%v", err)
		}
	}
	w.gone = gone
	if seen {
		w.served++
	}
}

// faultSample is a pod's CPU and memory, as told to a fake or as served
// with the time it was sampled.
type faultSample struct {
	at       time.Time
	milliCPU int64
	memory   int64
}

// listServed lists the pods of ns as the metrics API serves them, by name.
func listServed(ctx context.Context, metrics metricsclient.Interface, ns string) (map[string]faultSample, error) {
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

// faultCheckValue says whether a served value is what the fakes were told;
// a pod no fake was told of is an error.
func faultCheckValue(sc faultScope, pod string, s faultSample) error {
	want, ok := sc.told[pod]
	if !ok {
		return fmt.Errorf("pod %s served, but no fake was told of it", pod)
	}
	d := float64(s.milliCPU-want.milliCPU) / float64(want.milliCPU)
	if s.memory != want.memory || d > sc.tolerance || d < -sc.tolerance || s.milliCPU < 0 {
		return fmt.Errorf("pod %s served %dm and %d bytes; the fake was told %dm and %d bytes", pod, s.milliCPU, s.memory, want.milliCPU, want.memory)
	}
	return nil
}

// faultAllRight checks that every pod of the scope is served with right
// values sampled after since, and no other pod.
func faultAllRight(ctx context.Context, sc faultScope, since time.Time) error {
	metrics, err := newMetricsClient(suite.cluster.RESTConfig())
	if err != nil {
		return err
	}
	served, err := listServed(ctx, metrics, sc.ns)
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
		switch {
		case !ok:
			return fmt.Errorf("pod %s has no metrics", p)
		case !s.at.After(since.Add(-time.Second)):
			return fmt.Errorf("pod %s: sample of %s, not newer than %s", p, s.at.Format(time.TimeOnly), since.Format(time.TimeOnly))
		}
		if err := faultCheckValue(sc, p, s); err != nil {
			return err
		}
	}
	return nil
}

// faultLogLines counts the server's log lines saying target started
// failing for reason (for any reason if reason is empty), and those saying
// it recovered.
func faultLogLines(t *testing.T, target, reason string) (failing, recovered int) {
	t.Helper()
	words := []string{`target="` + target + `"`, `"Scrape target failing"`}
	if reason != "" {
		words = append(words, `reason="`+reason+`"`)
	}
	return logLines(t, words...), logLines(t, words[0], `"Scrape target recovered"`)
}

// partialLogLines counts the server's log lines saying target started
// leaving out malformed points.
func partialLogLines(t *testing.T, target string) int {
	t.Helper()
	return logLines(t, `target="`+target+`"`, `"Scrape target leaving out malformed points"`)
}

// logLines counts the server's log lines that hold every word.
func logLines(t *testing.T, words ...string) int {
	t.Helper()
	lines, err := linesWith(suite.server.Process.LogPath(), words...)
	must(t, err)
	return len(lines)
}

// createPinnedPods creates one pod per name, bound to node, with one
// container requesting 10m CPU, and waits until they run.
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
