//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

const (
	// loadDuration is how long the clients send requests.
	loadDuration = 60 * time.Second
	// loadClients is how many clients send requests back to back on each path (through the aggregator, and on
	// the server's port).
	loadClients = 8
	// loadPods is the size of the Deployment the HPA-like lists select.
	loadPods = 30
)

// TestLoad sends requests back to back from loadClients clients on each path for loadDuration and logs the
// latency of each shape and path.
func TestLoad(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	const ns = "e2e-load"
	newNamespace(ctx, t, ns)
	spec := env.DeploymentSpec{Namespace: ns, Name: "load", Replicas: loadPods, Containers: []string{"app", "sidecar"}, CPURequest: "100m"}
	pods, want := runDeployment(ctx, t, spec, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 64 << 20})
	direct := directEndpoint(t, suite.server)
	selected := listSelected(ns, spec.Selector().String())
	must(t, poll(ctx, "metrics for every pod of the Deployment", func(ctx context.Context) error {
		return servesAll(fetch(ctx, direct, selected), want)
	}))

	eps := []endpoint{aggregatorEndpoint(t, suite.cluster), direct}
	shapes := []shape{listAllPods(), selected, getPod(ns, pods[0].Name)}
	stop := watchScrapeLoop(ctx, t, direct, selected, want)
	pid := suite.server.Process.Pid()
	before, err := readProc(pid)
	must(t, err)
	began := time.Now()
	results := runLoad(ctx, eps, shapes, loadClients, loadDuration)
	elapsed := time.Since(began)
	after, err := readProc(pid)
	must(t, err)
	w := stop()

	cpu := after.CPU - before.CPU
	t.Logf("%d clients on each of %d paths for %v: %d requests; server CPU %.1f s (%.2f cores), RSS %s before, %s peak, %s after\n%s",
		loadClients, len(eps), elapsed.Round(time.Millisecond), len(results), cpu.Seconds(), cpu.Seconds()/elapsed.Seconds(),
		mib(before.RSS), mib(max(w.peakRSS, after.RSS)), mib(after.RSS), formatStats(summarize(results), elapsed))
	t.Logf("during the load: %d freshness checks, oldest sample served %v old (bound %v); %d scrape ticks, longest time between two %v (bound %v), last tick %v before the end",
		w.checks, w.maxAge.Round(time.Millisecond), staleBound(), w.ticks, w.maxTickGap.Round(time.Millisecond), tickBound(), w.lastTickAge.Round(time.Millisecond))

	if examples, n := firstFailures(results, 5); n > 0 {
		t.Errorf("%d of %d requests failed, e.g.:\n%s", n, len(results), strings.Join(examples, "\n"))
	}
	w.check(t, elapsed)
}

// servesAll reports an error unless r succeeded and holds every key of want.
func servesAll(r result, want []string) error {
	if r.failed() {
		return fmt.Errorf("%v", r)
	}
	got := map[string]bool{}
	for _, e := range r.answer.entries() {
		got[e.key] = true
	}
	if missing := slices.DeleteFunc(slices.Clone(want), func(k string) bool { return got[k] }); len(missing) > 0 {
		return fmt.Errorf("%d of %d missing, e.g. %s", len(missing), len(want), missing[0])
	}
	return nil
}

// staleBound is how long the server serves a value after computing it: 2 × resolution + request timeout
// (README, "Staleness").
func staleBound() time.Duration { return 2*suite.resolution + suite.timeout }

// tickBound is the longest the scrape loop may take between the ends of two ticks while it keeps its pace:
// ticks start every resolution and each ends within the request timeout of its start, so two ends are at most
// resolution + timeout apart; half a resolution more covers scheduling on a loaded machine.
func tickBound() time.Duration { return suite.resolution + suite.timeout + suite.resolution/2 }

// scrapeWatch is what watchScrapeLoop saw.
type scrapeWatch struct {
	checks, ticks int
	maxAge        time.Duration
	maxTickGap    time.Duration
	lastTickAge   time.Duration
	peakRSS       uint64
	problems      []string
}

func (w scrapeWatch) check(t *testing.T, elapsed time.Duration) {
	t.Helper()
	for _, p := range w.problems {
		t.Error(p)
	}
	// Every resolution brings a tick; the first and last may fall outside.
	if want := int(elapsed/suite.resolution) - 1; w.ticks < want {
		t.Errorf("%d scrape ticks in %v, want at least %d", w.ticks, elapsed.Round(time.Second), want)
	}
	if w.maxAge > staleBound() {
		t.Errorf("a sample %v old was served, more than %v", w.maxAge, staleBound())
	}
	if w.maxTickGap > tickBound() {
		t.Errorf("%v between two scrape ticks, more than %v", w.maxTickGap, tickBound())
	}
	if w.lastTickAge > tickBound() {
		t.Errorf("last scrape tick ended %v before the load did, more than %v", w.lastTickAge, tickBound())
	}
}

// watchScrapeLoop checks every second, until the returned function is called, that a list through ep (sh)
// serves every key of want with samples younger than staleBound, and reads the scrape loop's last tick and
// tick count from /metrics, and the server's RSS.
func watchScrapeLoop(ctx context.Context, t *testing.T, ep endpoint, sh shape, want []string) func() scrapeWatch {
	t.Helper()
	var w scrapeWatch
	const (
		lastTickName = "group_metrics_server_scraper_last_tick_timestamp_seconds"
		ticksName    = "group_metrics_server_scraper_cycle_duration_seconds_count"
	)
	var lastTick, lastCount float64
	problem := func(format string, args ...any) {
		if len(w.problems) < 10 {
			w.problems = append(w.problems, fmt.Sprintf(format, args...))
		}
	}
	stop := background(ctx, time.Second, func(ctx context.Context) {
		r := fetch(ctx, ep, sh)
		if ctx.Err() != nil {
			return
		}
		w.checks++
		if err := servesAll(r, want); err != nil {
			problem("freshness check at %s: %v", r.start.Format("15:04:05.000"), err)
		}
		for _, e := range r.answer.entries() {
			w.maxAge = max(w.maxAge, r.end.Sub(e.timestamp))
		}
		if st, err := readProc(suite.server.Process.Pid()); err == nil {
			w.peakRSS = max(w.peakRSS, st.RSS)
		}
		body, err := selfMetrics(ctx, ep)
		var tick, count float64
		if err == nil {
			tick, err = mustValue(body, lastTickName)
		}
		if err == nil {
			count, err = mustValue(body, ticksName)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			problem("read the scrape loop's metrics: %v", err)
		case lastTick > 0 && count > lastCount:
			// With one tick since the last read the gap is exact; with more, its average is a lower bound of
			// the longest.
			gap := time.Duration((tick - lastTick) / (count - lastCount) * float64(time.Second))
			w.maxTickGap = max(w.maxTickGap, gap)
			w.ticks += int(count - lastCount)
		}
		if err == nil {
			lastTick, lastCount = tick, count
			w.lastTickAge = time.Since(time.Unix(0, int64(tick*float64(time.Second))))
		}
	})
	return func() scrapeWatch {
		stop()
		return w
	}
}
