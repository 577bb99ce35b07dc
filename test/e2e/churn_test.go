//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

const (
	// churnDefault is how long TestChurn churns in make test; make soak sets
	// $GMS_CHURN_DURATION (churnDuration).
	churnDefault = 3 * time.Minute
	// churnInterval is how often a churn pod is created and, once churnPool are alive, the oldest deleted: up
	// to 400 of each a minute.
	churnInterval = 150 * time.Millisecond
	churnPool     = 24
	steadyPods    = 6
	churnLabel    = "churn" // marks the pods the churn creates and deletes
)

// TestChurn creates and deletes bare pods for churnDuration while clients list metrics: the server must lose
// nothing and keep nothing.
func TestChurn(t *testing.T) {
	d := churnDuration(t)
	ctx := begin(t, d+6*time.Minute)
	const ns = "e2e-churn"
	newNamespace(ctx, t, ns)
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: labels.SelectorFromSet(labels.Set{churnLabel: "true"})},
		fakekubelet.Usage{CPUNanoCores: 5e6, MemoryBytes: 16 << 20})
	steady := env.DeploymentSpec{Namespace: ns, Name: "steady", Replicas: steadyPods, Containers: []string{"app", "sidecar"}, CPURequest: "50m"}
	_, steadyKeys := runDeployment(ctx, t, steady, fakekubelet.Usage{CPUNanoCores: 20e6, MemoryBytes: 48 << 20})
	direct := directEndpoint(t, suite.server)
	nsList := shape{"list-namespace", metricsV1beta1 + "/namespaces/" + ns + "/pods"}
	must(t, poll(ctx, "metrics for the steady pods", func(ctx context.Context) error {
		return servesAll(fetch(ctx, direct, nsList), steadyKeys)
	}))

	pid := suite.server.Process.Pid()
	gaugesBefore := waitStoreMatches(ctx, t, direct, staleBound()+tickBound())
	rssBefore, heapBefore := settledMemory(ctx, t, direct, pid)
	c := &churn{ns: ns, nodes: suite.fleet.NodeNames, deleted: map[string]time.Time{}}
	listers := []*churnLister{
		{ep: aggregatorEndpoint(t, suite.cluster), sh: listAllPods(), steady: steadyKeys},
		{ep: direct, sh: nsList, steady: steadyKeys},
	}
	elapsed, peakRSS := c.runAll(ctx, t, d, aggregatorEndpoint(t, suite.cluster), listers, pid, direct)
	must(t, c.deleteRest(ctx))
	gaugesAfter := waitStoreMatches(ctx, t, direct, staleBound()+tickBound())
	rssAfter, heapAfter := settledMemory(ctx, t, direct, pid)

	c.report(t, listers, elapsed)
	t.Logf("store gauges (node, container): %v before, %v after; RSS %s before, %s peak, %s after; heap in use %s before, %s after",
		gaugesBefore, gaugesAfter, mib(rssBefore), mib(peakRSS), mib(rssAfter), mib(heapBefore), mib(heapAfter))
	if limit := rssBefore + max(rssBefore/2, 64<<20); rssAfter > limit {
		t.Errorf("RSS after the churn %s, more than %s (before %s + max(50%%, 64 MiB))", mib(rssAfter), mib(limit), mib(rssBefore))
	}
}

// churnDuration is $GMS_CHURN_DURATION (make soak), or churnDefault.
func churnDuration(t *testing.T) time.Duration {
	v := os.Getenv("GMS_CHURN_DURATION")
	if v == "" {
		return churnDefault
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute || d > 24*time.Hour {
		t.Fatalf("GMS_CHURN_DURATION=%q: want a duration from 1m to 24h", v)
	}
	return d
}

// runAll runs the churn, the probe and the listers for d, and returns how long that took and the server's (pid)
// peak RSS meanwhile. A run longer than churnDefault (a soak) logs the server's memory and store gauges every
// tenth of d, read from pid and from ep's /metrics.
func (c *churn) runAll(ctx context.Context, t *testing.T, d time.Duration, agg endpoint, listers []*churnLister, pid int, ep endpoint) (time.Duration, uint64) {
	churnCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { c.run(churnCtx) })
	wg.Go(func() { c.probe(churnCtx, ctx, agg) })
	for _, l := range listers {
		wg.Go(func() { l.run(churnCtx, c) })
	}
	var peakRSS uint64
	wg.Go(func() {
		every(churnCtx, time.Second, func() {
			if st, err := readProc(pid); err == nil {
				peakRSS = max(peakRSS, st.RSS)
			}
		})
	})
	if d > churnDefault {
		wg.Go(func() {
			every(churnCtx, d/10, func() {
				st, err := readProc(pid)
				body, err2 := selfMetrics(churnCtx, ep)
				heap, _, err3 := promtext.Value(body, "go_memstats_heap_inuse_bytes")
				containers, _, err4 := promtext.Value(body, storePoints, `kind="container"`)
				if err = cmp.Or(err, err2, err3, err4); err != nil {
					if churnCtx.Err() == nil { // not the read the churn's end cut short
						t.Logf("soak, %v in: %v", time.Since(began).Round(time.Second), err)
					}
					return
				}
				t.Logf("soak, %v in: %d pods created, RSS %s, heap in use %s, %.0f containers stored",
					time.Since(began).Round(time.Second), c.createdSoFar(), mib(st.RSS), mib(uint64(heap)), containers)
			})
		})
	}
	wg.Wait()
	return time.Since(began), peakRSS
}

// report logs what the churn, the probe and the listers saw, and fails the test for every problem.
func (c *churn) report(t *testing.T, listers []*churnLister, elapsed time.Duration) {
	t.Helper()
	minutes := elapsed.Minutes()
	t.Logf("churn for %v: %d pods created (%.0f/min), %d deleted with the probes (%.0f/min), %d create and %d delete errors",
		elapsed.Round(time.Second), c.created, float64(c.created)/minutes, len(c.deleted), float64(len(c.deleted))/minutes, c.createErrors, c.deleteErrors)
	for _, l := range listers {
		t.Logf("%s %s: %d lists, %d failed; steady pods missing %d times, oldest steady sample %v; %d deleted pods served past %v, longest after deletion %v",
			l.ep.name, l.sh.name, l.lists, l.fails, l.missing, l.maxAge.Round(time.Millisecond), l.staleServed, staleBound(), l.maxServedAfterDelete.Round(time.Millisecond))
	}
	slices.Sort(c.probeLatencies)
	if n := len(c.probeLatencies); n > 0 {
		t.Logf("%d new pods: metrics through the aggregator %v (median), %v (max) after the pod was Running (bound %v)",
			n, c.probeLatencies[n/2].Round(time.Millisecond), c.probeLatencies[n-1].Round(time.Millisecond), newPodBound())
	} else {
		t.Error("no new pod got metrics during the churn")
	}
	if c.created < 2*churnPool {
		t.Errorf("only %d pods created: the pool of %d never turned over", c.created, churnPool)
	}
	c.problems.report(t)
	for _, l := range listers {
		l.problems.report(t)
		if l.maxAge > staleBound() {
			t.Errorf("%s: a steady pod's sample %v old was served, more than %v", l.ep.name, l.maxAge, staleBound())
		}
	}
}

// newPodBound is how soon after a pod is Running its metrics must be served: its node's next scrape (a
// resolution, plus the request timeout) gives a first sample, and a pod younger than the store's 5 s
// first-window minimum gets its rate from the scrape after (one more resolution). Five seconds more cover the
// informers of the server and the fleet and a loaded machine.
func newPodBound() time.Duration { return 2*suite.resolution + suite.timeout + 5*time.Second }

// problemLog keeps the first ten problems found.
type problemLog struct {
	mu   sync.Mutex
	list []string
}

func (p *problemLog) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) < 10 {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	}
}

// report fails t for every problem.
func (p *problemLog) report(t *testing.T) {
	t.Helper()
	for _, s := range p.list {
		t.Error(s)
	}
}

// churn creates and deletes pods.
type churn struct {
	ns    string
	nodes []string

	mu                                  sync.Mutex
	deleted                             map[string]time.Time // pod name -> when its delete returned
	created, createErrors, deleteErrors int
	probeLatencies                      []time.Duration
	problems                            problemLog
}

func (c *churn) createdSoFar() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

func (c *churn) pod(name, node, role string) *corev1.Pod {
	ctr := corev1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10"}
	p := kwokPod(c.ns, name, node, map[string]string{churnLabel: role}, ctr)
	p.Spec.Tolerations, p.Spec.AutomountServiceAccountToken = nil, ptr.To(false)
	return p
}

func (c *churn) delete(ctx context.Context, name string) error {
	err := suite.cluster.Client().CoreV1().Pods(c.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.deleteErrors++
		return err
	}
	c.deleted[name] = time.Now()
	return nil
}

// run creates a pod every churnInterval, round robin over the nodes, and deletes the oldest once churnPool
// are alive, until ctx ends.
func (c *churn) run(ctx context.Context) {
	client := suite.cluster.Client()
	var alive []string
	i := 0
	every(ctx, churnInterval, func() {
		name := fmt.Sprintf("churn-%d", i)
		_, err := client.CoreV1().Pods(c.ns).Create(ctx, c.pod(name, c.nodes[i%len(c.nodes)], "true"), metav1.CreateOptions{})
		c.mu.Lock()
		if err == nil {
			c.created++
			alive = append(alive, name)
		} else if ctx.Err() == nil {
			c.createErrors++
		}
		c.mu.Unlock()
		if len(alive) > churnPool && c.delete(ctx, alive[0]) == nil {
			alive = alive[1:]
		}
		i++
	})
}

// probe creates one pod at a time, until churnCtx ends, and measures how long after it is Running its metrics
// are served through ep; then deletes it. Each step is bounded with ctx, which outlives churnCtx.
func (c *churn) probe(churnCtx, ctx context.Context, ep endpoint) {
	client := suite.cluster.Client()
	for i := 0; churnCtx.Err() == nil; i++ {
		name := fmt.Sprintf("probe-%d", i)
		if _, err := client.CoreV1().Pods(c.ns).Create(ctx, c.pod(name, c.nodes[i%len(c.nodes)], "probe"), metav1.CreateOptions{}); err != nil {
			c.problems.add("create %s: %v", name, err)
			return
		}
		if err := pollBounded(ctx, time.Minute, name+" to run", func(ctx context.Context) error {
			p, err := client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase != corev1.PodRunning {
				err = fmt.Errorf("phase %s", p.Status.Phase)
			}
			return err
		}); err != nil {
			c.problems.add("%v", err)
			return
		}
		running := time.Now()
		// Wait past the bound, so that a late answer is measured.
		err := pollBounded(ctx, 2*newPodBound(), "metrics of "+name, func(ctx context.Context) error {
			r := fetch(ctx, ep, getPod(c.ns, name))
			return wantf(!r.failed(), "%v", r)
		})
		latency := time.Since(running)
		switch {
		case err != nil:
			c.problems.add("new pod %s: no metrics %v after it was Running: %v", name, latency.Round(time.Millisecond), err)
		case latency > newPodBound():
			c.problems.add("new pod %s: metrics %v after it was Running, more than %v", name, latency.Round(time.Millisecond), newPodBound())
		}
		if err == nil {
			c.mu.Lock()
			c.probeLatencies = append(c.probeLatencies, latency)
			c.mu.Unlock()
		}
		if err := c.delete(ctx, name); err != nil {
			c.problems.add("delete %s: %v", name, err)
			return
		}
	}
}

// deleteRest deletes every pod the churn left and waits until they are gone.
func (c *churn) deleteRest(ctx context.Context) error {
	pods := suite.cluster.Client().CoreV1().Pods(c.ns)
	sel := metav1.ListOptions{LabelSelector: churnLabel}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel); err != nil {
		return fmt.Errorf("delete the churn pods: %w", err)
	}
	return poll(ctx, "the churn pods to be gone", func(ctx context.Context) error {
		list, err := pods.List(ctx, sel)
		if err == nil && len(list.Items) > 0 {
			err = fmt.Errorf("%d left", len(list.Items))
		}
		return err
	})
}

// churnLister lists metrics every half second during the churn.
type churnLister struct {
	ep     endpoint
	sh     shape
	steady []string

	lists, fails, missing, staleServed int
	maxAge, maxServedAfterDelete       time.Duration
	problems                           problemLog
}

func (l *churnLister) run(ctx context.Context, c *churn) {
	every(ctx, 500*time.Millisecond, func() {
		if r := fetch(ctx, l.ep, l.sh); ctx.Err() == nil {
			l.check(r, c)
		}
	})
}

func (l *churnLister) check(r result, c *churn) {
	problem := func(format string, args ...any) { l.problems.add(l.ep.name+" "+l.sh.name+": "+format, args...) }
	l.lists++
	if r.failed() {
		l.fails++
		problem("%v", r)
		return
	}
	if err := servesAll(r, l.steady); err != nil {
		l.missing++
		problem("steady pods at %s: %v", r.start.Format("15:04:05.000"), err)
	}
	for _, e := range r.answer.entries() {
		name, ok := strings.CutPrefix(e.key, c.ns+"/")
		if !ok {
			continue
		}
		if slices.Contains(l.steady, e.key) {
			l.maxAge = max(l.maxAge, r.end.Sub(e.timestamp))
			continue
		}
		c.mu.Lock()
		gone, ok := c.deleted[name]
		c.mu.Unlock()
		if !ok || !r.start.After(gone) {
			continue
		}
		// The request started after the pod's delete returned.
		after := r.start.Sub(gone)
		l.maxServedAfterDelete = max(l.maxServedAfterDelete, after)
		if after > staleBound() {
			l.staleServed++
			problem("pod %s served %v after it was deleted", name, after.Round(time.Millisecond))
		}
	}
}

// storePoints is the store's series gauge, by kind.
const storePoints = "group_metrics_server_store_points"

// seriesCount is a number of node and container series.
type seriesCount struct{ nodes, containers float64 }

func (s seriesCount) String() string { return fmt.Sprintf("(%v, %v)", s.nodes, s.containers) }

// waitStoreMatches waits, for at most bound, until the server's store gauges (read through ep) equal the
// nodes and containers the sources report now: every fleet node with its pods' containers, and every running
// ukpd instance of an existing pod. It returns the gauges.
func waitStoreMatches(ctx context.Context, t *testing.T, ep endpoint, bound time.Duration) seriesCount {
	t.Helper()
	var got seriesCount
	must(t, pollBounded(ctx, bound, "the store's series gauges to match what the sources report", func(ctx context.Context) error {
		body, err := selfMetrics(ctx, ep)
		if err != nil {
			return err
		}
		if got.nodes, err = mustValue(body, storePoints, `kind="node"`); err != nil {
			return err
		}
		if got.containers, err = mustValue(body, storePoints, `kind="container"`); err != nil {
			return err
		}
		want, err := reportedSeries(ctx)
		return cmp.Or(err, wantf(got == want, "gauges %v, sources report %v", got, want))
	}))
	return got
}

// reportedSeries counts what the fleet and the fake ukpd report now.
func reportedSeries(ctx context.Context) (seriesCount, error) {
	var n seriesCount
	for _, node := range suite.fleet.Nodes() {
		n.nodes++
		for _, p := range node.State(true).Pods {
			n.containers += float64(len(p.Containers))
		}
	}
	instances := suite.ukpd.Instances()
	if len(instances) == 0 {
		return n, nil
	}
	pods, err := suite.cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return n, err
	}
	exists := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			exists[p.Namespace+"/"+p.Name] = true
		}
	}
	for _, in := range instances {
		if in.State == fakeukpd.StateRunning && exists[in.Namespace+"/"+in.Pod] {
			n.containers++
		}
	}
	return n, nil
}

// settledMemory samples the RSS of pid every second for two resolutions and returns the median, and the Go
// heap in use the server reports (0 if it reports none).
func settledMemory(ctx context.Context, t *testing.T, ep endpoint, pid int) (rss, heap uint64) {
	t.Helper()
	var samples []uint64
	sampleCtx, cancel := context.WithTimeout(ctx, 2*suite.resolution)
	defer cancel()
	every(sampleCtx, time.Second, func() {
		st, err := readProc(pid)
		must(t, err)
		samples = append(samples, st.RSS)
	})
	must(t, ctx.Err())
	slices.Sort(samples)
	body, err := selfMetrics(ctx, ep)
	must(t, err)
	h, _, err := promtext.Value(body, "go_memstats_heap_inuse_bytes")
	must(t, err)
	return samples[len(samples)/2], uint64(h)
}
