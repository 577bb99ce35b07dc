//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// The metrics-server case runs metrics-server v0.8.0 beside the test's
// server, both reading the real kubelet: metrics-server /metrics/resource
// (sample times in ms), ours the Summary (to the second). Each reports a rate
// C/W over [T−W, T] and a working set at T; both APIs carry T to the second
// (metav1.Time) and W exactly, so a window's end sample was taken at T+x, x in
// [0, 1 s). metrics-server's windows are about 10 s, W exact to the ms (start
// T+x−W); ours 5 s, both ends cut to the second. Every value is checked
// against what it must be; the servers' difference is logged with its bound.
// A third server, ours with --kubelet-endpoint=resource (rdOursResource) as
// the identity manifests/examples/kubelet-resource-endpoint grants, reads
// what metrics-server reads: its 5 s windows are exact to the ms and are
// checked as metrics-server's are (rdExact), and so is its difference from
// metrics-server.
//
// Pods: the kubelet samples a container anew for every request (CRI
// ListContainerStats: containerd stamps the time, then its shim reads the
// cgroup, containerd services/tasks/local.go getTasksMetrics; the kubelet
// copies both, pkg/kubelet/stats/cri_stats_provider.go
// makeContainerCPUAndMemoryStats), so the test cannot see the servers'
// samples. It reads the cgroup itself (cpuacct.usage; memory.usage_in_bytes −
// total_inactive_file, containerd's working set) every rdTruthPeriod between
// two clock readings. CPU time only grows: U(τ) is at least any reading
// finished by τ and at most any begun after it. A sample's read lies within d
// of its stamp, d the longest request for stats the kubelet answered during
// the run (kubelet_http_requests_duration_seconds, to the bucket bound),
// taken either side, which covers a reader that stamps after reading
// (cAdvisor) too. So C lies between U at the latest possible end minus U at
// the earliest possible start, and the reverse: ±1 s of usage over ours' 5 s
// (burn's 250m: about 195m..305m), about a CFS period's quota (25 ms) at each
// end over metrics-server's exact 10 s. Ours' windows chain (each begins at
// the sample that ended the one before), so over a run of them only the run's
// ends carry the cut seconds (rdCheckChain). Both servers round rates down to
// the nanocore; metrics-server's counters pass through float64 seconds
// (rdCounterFloat). The working set must lie within what the cgroup showed
// from T−d to T+1 s+d, widened by the charge batches usage_in_bytes may hold
// charged ahead (chargeBatches).
//
// The node: its CPU and memory are cAdvisor's cached sample of the root
// cgroup (pkg/kubelet/server/stats/summary.go, GetCPUAndMemoryStats:
// GetCgroupCPUAndMemoryStats("/", false)), the same for every request until
// cAdvisor samples again. The test reads /metrics/resource every
// rdKubeletPeriod and keeps every sample. A server's node reading must be two
// of them: memory equal, W·rate the counter difference within rounding (the
// rate's nanocore, float64's ulp of the counter in seconds). cAdvisor at times
// samples twice within tens of ms (housekeeping and the eviction manager) and
// a server may read the first, which the test can miss: such a reading is
// logged, and at least two of each server's must be samples the test read.
// Over the same two samples the servers differ only by their windows:
// ours − metrics-server = ΔC·(1/W_ours − 1/W_ms).
const (
	// rdOursResource is ours reading /metrics/resource
	// (--kubelet-endpoint=resource), as its own ServiceAccount
	// rdResourceAccount.
	rdOursResource    = "ours-resource"
	rdResourceAccount = "gms-realnode-resource"
	rdTruthPeriod     = 20 * time.Millisecond
	rdKubeletPeriod   = 100 * time.Millisecond
	// rdCounterFloat bounds, in ns, what metrics-server's two counters of a
	// window lose from float64 seconds to integer ns (uint64(value*1e9),
	// pkg/scraper/client/resource/decode.go): a container's counter is far
	// below 2^53 ns, so each is off by under 1 ns of rounding and 1 of
	// truncation.
	rdCounterFloat = 4
)

// rdExact are the servers whose windows are exact to the millisecond: they
// read /metrics/resource. Ours' cut both ends to the second.
var rdExact = map[string]bool{"metrics-server": true, rdOursResource: true}

// rdReadings are one server's distinct readings by "ns/name" and "node/name".
type rdReadings map[string][]usage

func (r rdReadings) add(key string, u usage) {
	if !slices.ContainsFunc(r[key], func(v usage) bool { return v.end.Equal(u.end) && v.start.Equal(u.start) }) {
		r[key] = append(r[key], u)
	}
}

func checkRealDifferential(ctx context.Context, t *testing.T, rn *realNodeEnv) {
	began := time.Now()
	pods := rdPodsOnNode(ctx, t, rn)
	// Every sample a checked reading holds is taken after this histogram
	// reading and after the cgroup readings begin.
	kl := newRDKubelet(t, rn.node)
	hist0, err := kl.statsHistogram(ctx)
	must(t, err)
	truth := rdStartTruth(ctx, pods)
	defer truth.stop()
	node := kl.follow(ctx, t)

	// Ours again, reading /metrics/resource as metrics-server does, as the
	// identity manifests/examples/kubelet-resource-endpoint grants. Every
	// sample it reads is taken after resStart.
	resStart := time.Now()
	kubeconfig := rsGrant(ctx, t, rn, rdResourceAccount, "manifests/examples/kubelet-resource-endpoint", nil)
	rsCheckAccess(ctx, t, rn, rdResourceAccount, false, true)
	resProc, resCfg := startServerLike(t, rn.server, rdResourceAccount, "--kubeconfig="+kubeconfig, "--kubelet-endpoint=resource")

	// metrics-server v0.8.0 refuses a resolution below 10s. Every sample it
	// reads is taken after msStart.
	msStart := time.Now()
	ms, remove, err := env.StartMetricsServerWithOwnRBAC(ctx, suite.cluster, "metrics-server-realnode", suite.binDir, rn.kubeletCA, 10*time.Second, suite.timeout)
	if remove != nil {
		cleanup(t, "delete metrics-server's RBAC", remove)
	}
	if ms != nil {
		t.Cleanup(func() { _ = ms.Process.Stop() })
	}
	must(t, err)
	t.Logf("metrics-server ready as its own ServiceAccount %v after the case began", since(began))

	c := &rdCollection{rn: rn, pods: pods, truth: truth, node: node, kubelet: kl, hist0: hist0,
		got: map[string]rdReadings{"ours": {}, rdOursResource: {}, "metrics-server": {}}, notBefore: map[string]time.Time{"metrics-server": msStart, rdOursResource: resStart}}
	c.collect(ctx, t, map[string]*rest.Config{"ours": rn.server.RESTConfig(), rdOursResource: resCfg, "metrics-server": ms.RESTConfig()}, ms.Process, resProc)
	samples := node.stop(t)
	if c.hist1 == nil {
		c.hist1, err = kl.statsHistogram(ctx)
		must(t, err)
	}
	d, calls, err := rdLongestRequest(hist0, c.hist1)
	must(t, err)
	t.Logf("the kubelet answered %d requests for its stats during the run, each within %v (its histogram's bucket): d = %v", calls, d, d)
	// The cgroup readings must reach past the latest sample a pod reading
	// may hold.
	var last time.Time
	for _, r := range c.got {
		for key := range pods {
			for _, u := range r[key] {
				last = maxTime(last, u.end)
			}
		}
	}
	must(t, pollBounded(ctx, 10*time.Second, "cgroup readings past the last window", func(context.Context) error {
		if need := last.Add(time.Second + time.Millisecond + d); truth.latest().Before(need) {
			return fmt.Errorf("latest cgroup reading %s, need one after %s", truth.latest().Format(time.StampMilli), need.Format(time.StampMilli))
		}
		return nil
	}))
	c.check(t, truth.stop(), samples, d)
	t.Logf("case took %v", since(began))
}

// rdCollection is both servers' readings of the real node's pods and the
// node, with the cgroups' and the kubelet's readings meanwhile.
type rdCollection struct {
	rn           *realNodeEnv
	pods         map[string]rdCgroups
	truth        *rdTruthSampler
	node         *rdFollower
	kubelet      rdKubelet
	hist0, hist1 map[float64]uint64
	got          map[string]rdReadings // by server: "ours", rdOursResource, "metrics-server"
	// notBefore is when a server's samples may begin: metrics-server's and
	// rdOursResource's are taken for their requests, after they started.
	// (Ours ran before the case.)
	notBefore map[string]time.Time
}

func (c *rdCollection) nodeKey() string { return "node/" + c.rn.node.Name() }

// collect reads every server every second until each has what the checks
// need (enough). A server whose readings never qualify fails here; what it
// served is still checked, to say how it is wrong. procs are the servers'
// processes but the suite's.
func (c *rdCollection) collect(ctx context.Context, t *testing.T, servers map[string]*rest.Config, procs ...*cluster.Process) {
	t.Helper()
	clients := map[string]metricsclient.Interface{}
	for name, cfg := range servers {
		mc, err := metricsclient.NewForConfig(cfg)
		must(t, err)
		clients[name] = mc
	}
	watch := append(append(append(watched(), procs...), c.rn.server.Process), c.rn.node.Processes()...)
	// metrics-server's windows are 10 s long and begin at its first scrape:
	// it has two readings of each pod after its third.
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	err := cluster.PollUntil(ctx, "readings of every pod and the node from each server", time.Second, 10*time.Second, watch, func(ctx context.Context) error {
		for name, mc := range clients {
			if err := rdRead(ctx, mc, c.rn, c.pods, c.got[name]); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := c.enough(0); err != nil {
			return err
		}
		h, err := c.kubelet.statsHistogram(ctx)
		if err != nil {
			return err
		}
		d, _, err := rdLongestRequest(c.hist0, h)
		if err != nil {
			return err
		}
		c.hist1 = h
		return c.enough(d)
	})
	if err != nil {
		t.Error(err)
	}
}

// enough reports whether each server has readings of every pod that the
// cgroup readings can bound with d (metrics-server two, ours three, for a
// run of them: rdCheckChain), and two of the node that are two samples the
// test read (rdMatchNode).
func (c *rdCollection) enough(d time.Duration) error {
	for name, r := range c.got {
		want := 2
		if !rdExact[name] {
			want = 3
		}
		for key := range c.pods {
			if n := rdCountCheckable(r[key], c.truth.began(), d, c.notBefore[name]); n < want {
				return fmt.Errorf("%s: %d readings of %s within the cgroup readings, want %d", name, n, key, want)
			}
		}
		samples, n := c.node.samples(), 0
		for _, u := range r[c.nodeKey()] {
			if m, _ := rdMatchNode(u, samples, rdExact[name]); m != nil {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%s: %d readings of %s are two samples the test read", name, n, c.nodeKey())
		}
	}
	return nil
}

// check checks every reading against the cgroup readings cg or the node
// samples, and each of ours' differences from metrics-server.
func (c *rdCollection) check(t *testing.T, cg map[string][]rdTruth, samples rdKubeletSamples, d time.Duration) {
	rdCheckFresh(t, samples)
	bounds := map[string]map[string][]rdBound{}
	matches := map[string][]*rdNodeMatch{}
	for name, r := range c.got {
		exact := rdExact[name]
		bounds[name] = map[string][]rdBound{}
		for key := range c.pods {
			bounds[name][key] = rdCheckPod(t, name, key, r[key], cg[key], d, exact, c.notBefore[name])
			if !exact {
				rdCheckChain(t, key, r[key], cg[key], d)
			}
		}
		matches[name] = rdCheckNode(t, name, c.rn.node.Name(), r[c.nodeKey()], samples.node, exact)
	}
	ref := c.got["metrics-server"]
	for _, name := range []string{"ours", rdOursResource} {
		ours := c.got[name]
		for key := range c.pods {
			rdPairs(t, name, key, ours[key], bounds[name][key], ref[key], bounds["metrics-server"][key])
		}
		rdNodePairs(t, name, c.rn.node.Name(), ours[c.nodeKey()], matches[name], ref[c.nodeKey()], matches["metrics-server"])
	}
}

// rdPodsOnNode returns the cgroup directories of every pod running on the
// real node, by "ns/name"; each must have one container.
func rdPodsOnNode(ctx context.Context, t *testing.T, rn *realNodeEnv) map[string]rdCgroups {
	list, err := suite.cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + rn.node.Name()})
	must(t, err)
	out := map[string]rdCgroups{}
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if len(p.Spec.Containers) != 1 {
			t.Fatalf("pod %s/%s on %s has %d containers; this case compares one-container pods", p.Namespace, p.Name, rn.node.Name(), len(p.Spec.Containers))
		}
		var dirs rdCgroups
		for ctl, dir := range map[string]*string{"cpuacct": &dirs.cpuacct, "memory": &dirs.memory} {
			*dir, _, err = taskCgroup(ctx, rn.node, p.Status.ContainerStatuses[0].ContainerID, ctl)
			must(t, err)
		}
		for _, f := range []string{filepath.Join(dirs.cpuacct, "cpuacct.usage"), filepath.Join(dirs.memory, "memory.stat")} {
			_, err := os.Stat(f)
			must(t, err)
		}
		out[p.Namespace+"/"+p.Name] = dirs
	}
	for _, want := range []string{rn.ns + "/burn", rn.ns + "/fill"} {
		if _, ok := out[want]; !ok {
			t.Fatalf("pod %s is not running on %s", want, rn.node.Name())
		}
	}
	return out
}

// rdRead adds what c serves now for pods and the real node to r.
func rdRead(ctx context.Context, c metricsclient.Interface, rn *realNodeEnv, pods map[string]rdCgroups, r rdReadings) error {
	for key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		pm, err := c.MetricsV1beta1().PodMetricses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.add(key, podUsage(*pm))
	}
	nm, err := c.MetricsV1beta1().NodeMetricses().Get(ctx, rn.node.Name(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	r.add("node/"+nm.Name, usage{cpuNano: nm.Usage.Cpu().ScaledValue(-9), memory: nm.Usage.Memory().Value(),
		start: nm.Timestamp.Add(-nm.Window.Duration), end: nm.Timestamp.Time})
	return nil
}

// rdCountCheckable counts the readings whose earliest possible start sample
// (d before the start or notBefore) is after the cgroup readings began.
func rdCountCheckable(us []usage, began time.Time, d time.Duration, notBefore time.Time) int {
	n := 0
	for _, u := range us {
		if maxTime(u.start, notBefore).Add(-d).After(began) {
			n++
		}
	}
	return n
}

// rdBound is what a reading was checked against: CPU in nanocores, memory
// in bytes, and memRead, the range the cgroup showed before the charge batch.
type rdBound struct {
	cpuLo, cpuHi float64
	memLo, memHi int64
	memRead      [2]int64
}

// rdCheckPod checks each reading of the pod key against the cgroup readings
// tr (rdPodBound); at least two must be checkable.
func rdCheckPod(t *testing.T, server, key string, us []usage, tr []rdTruth, d time.Duration, exact bool, notBefore time.Time) []rdBound {
	out := make([]rdBound, len(us))
	checked := 0
	for i, u := range us {
		b, ok := rdPodBound(tr, u, d, exact, notBefore)
		out[i] = b
		w, end := u.end.Sub(u.start), u.end.Format(time.TimeOnly)
		if !ok {
			t.Logf("%s: pod %s: %.1fm over %v ending %s: its window began before the cgroup readings", server, key, float64(u.cpuNano)/1e6, w, end)
			out[i] = rdBound{cpuLo: math.NaN()}
			continue
		}
		checked++
		t.Logf("%s: pod %s: cpu %.2fm over %v ending %s (the cgroup allows %.2fm..%.2fm); memory %d B (the cgroup read %d..%d B; allows %d..%d B)", server, key,
			float64(u.cpuNano)/1e6, w, end, b.cpuLo/1e6, b.cpuHi/1e6, u.memory, b.memRead[0], b.memRead[1], b.memLo, b.memHi)
		if c := float64(u.cpuNano); c < b.cpuLo || c > b.cpuHi {
			t.Errorf("%s: pod %s: cpu %.2fm over %v ending %s, the cgroup allows %.2fm..%.2fm", server, key, c/1e6, w, end, b.cpuLo/1e6, b.cpuHi/1e6)
		}
		if u.memory < b.memLo || u.memory > b.memHi {
			t.Errorf("%s: pod %s: memory %d B at %s, the cgroup allows %d..%d B", server, key, u.memory, end, b.memLo, b.memHi)
		}
	}
	if checked < 2 {
		t.Errorf("%s: pod %s: %d readings checked against the cgroup, want at least 2", server, key, checked)
	}
	return out
}

// rdCheckChain checks each run of ours' chained readings of the pod as one
// window: the CPU times add up to the counter's difference between the run's
// first and last sample, the second cut off one window falling into the next.
// A run of three must be checkable.
func rdCheckChain(t *testing.T, key string, us []usage, tr []rdTruth, d time.Duration) {
	us = slices.SortedFunc(slices.Values(us), func(a, b usage) int { return a.end.Compare(b.end) })
	longest := 0
	for i := 0; i < len(us); {
		j := i + 1
		for j < len(us) && us[j].start.Equal(us[j-1].end) {
			j++
		}
		run := us[i:j]
		i = j
		if len(run) < 2 {
			continue
		}
		whole := usage{start: run[0].start, end: run[len(run)-1].end}
		b, ok := rdPodBound(tr, whole, d, false, time.Time{})
		if !ok {
			continue
		}
		var cpuTime float64 // nanocore-seconds
		for _, u := range run {
			cpuTime += float64(u.cpuNano) * u.end.Sub(u.start).Seconds()
		}
		w := whole.end.Sub(whole.start)
		avg := cpuTime / w.Seconds()
		longest = max(longest, len(run))
		t.Logf("ours: pod %s: %d consecutive readings, %s..%s: %.2fm over %v (the cgroup allows %.2fm..%.2fm)",
			key, len(run), whole.start.Format(time.TimeOnly), whole.end.Format(time.TimeOnly), avg/1e6, w, b.cpuLo/1e6, b.cpuHi/1e6)
		if avg < b.cpuLo || avg > b.cpuHi {
			t.Errorf("ours: pod %s: %.2fm over %d consecutive readings (%v), the cgroup allows %.2fm..%.2fm", key, avg/1e6, len(run), w, b.cpuLo/1e6, b.cpuHi/1e6)
		}
	}
	if longest < 3 {
		t.Errorf("ours: pod %s: at most %d consecutive readings within the cgroup readings, want 3", key, longest)
	}
}

// rdPodBound derives the bounds of a pod reading u from the cgroup readings:
// exact says W is exact (metrics-server's), otherwise both ends are cut to the
// second (ours); no sample was taken before notBefore.
func rdPodBound(tr []rdTruth, u usage, d time.Duration, exact bool, notBefore time.Time) (rdBound, bool) {
	T, w := u.end, u.end.Sub(u.start)
	lo, hi, ok := math.Inf(1), math.Inf(-1), true
	// span widens [lo, hi] by the start sample in [s0, s1], the end in [e0, e1].
	span := func(s0, s1, e0, e1 time.Time) {
		le, ok1 := rdBelow(tr, e0)
		hs, ok2 := rdAbove(tr, s1)
		he, ok3 := rdAbove(tr, e1)
		ls, ok4 := rdBelow(tr, s0)
		ok = ok && ok1 && ok2 && ok3 && ok4
		lo, hi = min(lo, float64(le)-float64(hs)), max(hi, float64(he)-float64(ls))
	}
	if exact {
		// The end at T+x, x in [0, 1 s), the start exactly W before it, each
		// to the ms, not before notBefore: x in steps of the cgroup period.
		for x := max(0, notBefore.Sub(u.start)).Truncate(rdTruthPeriod); x < time.Second; x += rdTruthPeriod {
			e0, e1 := T.Add(x-d), T.Add(x+rdTruthPeriod+time.Millisecond+d)
			span(e0.Add(-w), e1.Add(-w), e0, e1)
		}
	} else {
		span(u.start.Add(-d), u.start.Add(time.Second+d), T.Add(-d), T.Add(time.Second+d))
	}
	if math.IsInf(lo, 1) { // no x left: a window claimed before notBefore
		return rdBound{}, false
	}
	ws := w.Seconds()
	mlo, mhi, mok := rdMemoryRange(tr, T.Add(-d), T.Add(time.Second+time.Millisecond+d))
	slack := chargeBatches()
	return rdBound{cpuLo: max(0, math.Floor((lo-rdCounterFloat)/ws)-1), cpuHi: (hi + rdCounterFloat) / ws,
		memLo: max(0, mlo-slack), memHi: mhi + slack, memRead: [2]int64{mlo, mhi}}, ok && mok
}

// rdPairs checks, for each of metrics-server's readings of the pod, ours
// whose window overlaps it most: their difference within what their bounds
// allow.
func rdPairs(t *testing.T, name, key string, ours []usage, ob []rdBound, ref []usage, rb []rdBound) {
	for i, m := range ref {
		if math.IsNaN(rb[i].cpuLo) {
			continue
		}
		best, overlap := -1, time.Duration(0)
		for j, o := range ours {
			ov := time.Duration(min(o.end.UnixNano(), m.end.UnixNano()) - max(o.start.UnixNano(), m.start.UnixNano()))
			if !math.IsNaN(ob[j].cpuLo) && ov > overlap {
				best, overlap = j, ov
			}
		}
		if best < 0 {
			t.Errorf("pod %s: no reading of %s overlaps metrics-server's window ending %s", key, name, m.end.Format(time.TimeOnly))
			continue
		}
		o, b, r := ours[best], ob[best], rb[i]
		diff := float64(o.cpuNano - m.cpuNano)
		lo, hi := b.cpuLo-r.cpuHi, b.cpuHi-r.cpuLo
		t.Logf("pod %s: %s %.2fm over %v ending %s, metrics-server %.2fm over %v ending %s (overlap %v): cpu difference %+.2fm, bound %+.2fm..%+.2fm; memory %d vs %d B, difference %+d B, bound %+d..%+d B",
			key, name, float64(o.cpuNano)/1e6, o.end.Sub(o.start), o.end.Format(time.TimeOnly), float64(m.cpuNano)/1e6, m.end.Sub(m.start), m.end.Format(time.TimeOnly), overlap,
			diff/1e6, lo/1e6, hi/1e6, o.memory, m.memory, o.memory-m.memory, b.memLo-r.memHi, b.memHi-r.memLo)
		if diff < lo || diff > hi {
			t.Errorf("pod %s: %s − metrics-server cpu difference %+.2fm outside %+.2fm..%+.2fm", key, name, diff/1e6, lo/1e6, hi/1e6)
		}
	}
}

// rdNodeMatch is the two samples a node reading is, and the rounding its
// rate was checked within (nanocores).
type rdNodeMatch struct {
	s, e rdNodeSample
	tol  float64
}

// rdMatchNode returns the two samples the node reading u is made of, if the
// test read them: memory equal and the counter difference within rounding;
// and a line for each pair whose times fit u but whose values do not. The
// samples s and e are the ends of u if e's time cut to the second is u's end
// and, exact (metrics-server), e−s is u's length, or else (ours) s's time cut
// to the second is u's start.
func rdMatchNode(u usage, samples []rdNodeSample, exact bool) (*rdNodeMatch, []string) {
	w := u.end.Sub(u.start)
	var tried []string
	for j, s := range samples {
		for _, e := range samples[j+1:] {
			fits := s.at.Truncate(time.Second).Equal(u.start)
			if exact {
				fits = e.at.Sub(s.at) == w
			}
			if !fits || !e.at.Truncate(time.Second).Equal(u.end) {
				continue
			}
			dc, errNs := rdCounterDelta(s, e)
			want := float64(dc) / w.Seconds()
			tol := errNs/w.Seconds() + 2 // the rate's nanocore, float64's rounding of the division
			if math.Abs(float64(u.cpuNano)-want) <= tol && float64(u.memory) == e.memory {
				return &rdNodeMatch{s: s, e: e, tol: tol}, nil
			}
			tried = append(tried, fmt.Sprintf("the samples at %s and %s: %d ns / %v = %.6fm (±%.0f nanocores), memory %.0f B",
				s.at.Format(time.StampMilli), e.at.Format(time.StampMilli), dc, w, want/1e6, tol, e.memory))
		}
	}
	return nil, tried
}

// rdCheckNode matches each node reading to the kubelet's samples
// (rdMatchNode), nil for none; at least two must match.
func rdCheckNode(t *testing.T, server, node string, us []usage, samples []rdNodeSample, exact bool) []*rdNodeMatch {
	if len(samples) == 0 {
		t.Fatalf("no node samples read from the kubelet")
	}
	out := make([]*rdNodeMatch, len(us))
	checked := 0
	for i, u := range us {
		w, cpu, end := u.end.Sub(u.start), float64(u.cpuNano)/1e6, u.end.Format(time.TimeOnly)
		m, tried := rdMatchNode(u, samples, exact)
		out[i] = m
		if m != nil {
			checked++
			dc, _ := rdCounterDelta(m.s, m.e)
			t.Logf("%s: node %s: cpu %.6fm over %v ending %s is the kubelet's samples at %s and %s: %d ns / %v = %.6fm (±%.0f nanocores); memory %d B, the kubelet's %.0f B",
				server, node, cpu, w, end, m.s.at.Format(time.StampMilli), m.e.at.Format(time.StampMilli), dc, w, float64(dc)/w.Seconds()/1e6, m.tol, u.memory, m.e.memory)
			continue
		}
		fits := "none"
		if len(tried) > 0 {
			fits = "\n" + strings.Join(tried, "\n")
		}
		t.Logf("%s: node %s: cpu %.6fm, memory %d B over %v ending %s is not two of the %d samples the test read; of those whose times fit: %s",
			server, node, cpu, u.memory, w, end, len(samples), fits)
	}
	if checked < 2 {
		t.Errorf("%s: node %s: %d readings are two samples the test read, want at least 2", server, node, checked)
	}
	return out
}

// rdNodePairs checks, for each of metrics-server's node readings, ours over
// the same two samples: ours − metrics-server = ΔC·(1/W_ours − 1/W_ms)
// within both rates' rounding.
func rdNodePairs(t *testing.T, name, node string, ours []usage, om []*rdNodeMatch, ref []usage, rm []*rdNodeMatch) {
	paired := 0
	for i, m := range ref {
		if rm[i] == nil {
			continue
		}
		j := slices.IndexFunc(om, func(o *rdNodeMatch) bool { return o != nil && o.s.at.Equal(rm[i].s.at) && o.e.at.Equal(rm[i].e.at) })
		if j < 0 {
			t.Logf("node %s: metrics-server's %.3fm over %v ending %s: %s has no reading over the same samples", node, float64(m.cpuNano)/1e6, m.end.Sub(m.start), m.end.Format(time.TimeOnly), name)
			continue
		}
		paired++
		o := ours[j]
		dc, _ := rdCounterDelta(rm[i].s, rm[i].e)
		wo, wm := o.end.Sub(o.start), m.end.Sub(m.start)
		diff, want, tol := float64(o.cpuNano-m.cpuNano), float64(dc)*(1/wo.Seconds()-1/wm.Seconds()), om[j].tol+rm[i].tol
		t.Logf("node %s: the kubelet's samples at %s and %s: %s %.3fm over %v, metrics-server %.3fm over %v: difference %+.3fm, ΔC·(1/W_ours − 1/W_ms) = %+.3fm (±%.0f nanocores); memory %d vs %d B",
			node, rm[i].s.at.Format(time.StampMilli), rm[i].e.at.Format(time.StampMilli), name, float64(o.cpuNano)/1e6, wo, float64(m.cpuNano)/1e6, wm, diff/1e6, want/1e6, tol, o.memory, m.memory)
		if math.Abs(diff-want) > tol || o.memory != m.memory {
			t.Errorf("node %s: %s %d, metrics-server %d nanocores: difference %.0f, want %.0f ± %.0f; memory %d vs %d B", node, name, o.cpuNano, m.cpuNano, diff, want, tol, o.memory, m.memory)
		}
	}
	if paired == 0 {
		t.Errorf("node %s: no reading of %s and metrics-server over the same samples of the kubelet", node, name)
	}
}

// rdCounterDelta is the difference of two node counters in ns, as
// metrics-server computes it from /metrics/resource's float64 seconds
// (uint64(value*1e9), pkg/scraper/client/resource/decode.go), and how far it
// may be from the kubelet's exact difference, which ours reads: each
// counter's float64 ulp in seconds and in ns, and the truncation.
func rdCounterDelta(s, e rdNodeSample) (uint64, float64) {
	ulp := func(v float64) float64 { return math.Nextafter(v, math.Inf(1)) - v }
	errNs := 0.0
	for _, v := range []float64{s.cpu, e.cpu} {
		errNs += ulp(v)*1e9 + ulp(v*1e9) + 1
	}
	return uint64(e.cpu*1e9) - uint64(s.cpu*1e9), errNs
}

// rdCheckFresh checks what the pods' bounds assume: the kubelet samples a
// container anew for each request (CRI), not from a cache (cAdvisor), so
// every /metrics/resource the test read carried a new container time.
func rdCheckFresh(t *testing.T, s rdKubeletSamples) {
	for i := 1; i < len(s.containerTimes); i++ {
		if !s.containerTimes[i].After(s.containerTimes[i-1]) {
			t.Errorf("two /metrics/resource reads carried the container sample of %s: the kubelet does not sample containers per request", s.containerTimes[i].Format(time.StampMilli))
			return
		}
	}
	var at []string
	for _, n := range s.node {
		at = append(at, n.at.Format("15:04:05.000"))
	}
	t.Logf("every one of %d /metrics/resource reads sampled the containers anew; the node: %d samples of cAdvisor's, at %s", len(s.containerTimes), len(s.node), strings.Join(at, ", "))
}

// rdKubelet reads the real kubelet's Prometheus endpoints directly as the
// admin (the kubelet authenticates them and asks kube-apiserver, which
// allows the admin nodes/metrics), verifying its certificate against the
// cluster CA. (kube-apiserver's node proxy refuses a loopback node.)
type rdKubelet struct {
	client *http.Client
	base   string
}

func newRDKubelet(t *testing.T, n *cluster.RealNode) rdKubelet {
	cfg := suite.cluster.RESTConfig()
	cfg.Host, cfg.CAData, cfg.CAFile = n.KubeletURL(), suite.cluster.CACertPEM(), ""
	client, err := rest.HTTPClientFor(cfg)
	must(t, err)
	t.Cleanup(client.CloseIdleConnections)
	return rdKubelet{client: client, base: n.KubeletURL()}
}

func (k rdKubelet) get(ctx context.Context, path string, names ...string) (map[string]*dto.MetricFamily, error) {
	code, body, err := env.Get(ctx, k.client, k.base+path)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d: %.300s", code, body)
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s from the kubelet: %w", path, err)
	}
	return promtext.Families(body, names...)
}

// rdNodeSample is a sample of the root cgroup from /metrics/resource.
type rdNodeSample struct {
	at          time.Time
	cpu, memory float64 // seconds, bytes
}

// rdKubeletSamples are the node's distinct samples and each read's latest
// container sample time.
type rdKubeletSamples struct {
	node           []rdNodeSample
	containerTimes []time.Time
}

// rdFollower reads /metrics/resource every rdKubeletPeriod. A failed read is
// counted and skipped: the readings that end on a sample it missed fail.
type rdFollower struct {
	mu       sync.Mutex
	s        rdKubeletSamples
	halt     func()
	failures int
	lastErr  error
}

func (k rdKubelet) follow(ctx context.Context, t *testing.T) *rdFollower {
	f := &rdFollower{}
	f.halt = background(ctx, rdKubeletPeriod, func(ctx context.Context) {
		fams, err := k.get(ctx, "/metrics/resource", "node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "container_cpu_usage_seconds_total")
		f.mu.Lock()
		defer f.mu.Unlock()
		if err == nil && ctx.Err() != nil {
			return
		}
		cpu, mem := fams["node_cpu_usage_seconds_total"].GetMetric(), fams["node_memory_working_set_bytes"].GetMetric()
		if err == nil && (len(cpu) != 1 || len(mem) != 1 || cpu[0].GetTimestampMs() != mem[0].GetTimestampMs()) {
			err = fmt.Errorf("/metrics/resource: node samples %v, %v", cpu, mem)
		}
		if err != nil {
			f.failures++
			f.lastErr = err
			return
		}
		at := time.UnixMilli(cpu[0].GetTimestampMs())
		if n := len(f.s.node); n == 0 || f.s.node[n-1].at.Before(at) {
			f.s.node = append(f.s.node, rdNodeSample{at: at, cpu: cpu[0].GetCounter().GetValue(), memory: mem[0].GetGauge().GetValue()})
		}
		var latest time.Time
		for _, m := range fams["container_cpu_usage_seconds_total"].GetMetric() {
			latest = maxTime(latest, time.UnixMilli(m.GetTimestampMs()))
		}
		f.s.containerTimes = append(f.s.containerTimes, latest)
	})
	t.Cleanup(f.halt)
	return f
}

func (f *rdFollower) samples() []rdNodeSample {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.s.node)
}

func (f *rdFollower) stop(t *testing.T) rdKubeletSamples {
	f.halt()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		t.Logf("%d reads of /metrics/resource failed, the last: %v", f.failures, f.lastErr)
	}
	return f.s
}

// statsHistogram returns the kubelet's histogram of the time it took to
// answer GET /stats/... and /metrics/resource (path "stats" and
// "metrics/resource", pkg/kubelet/server/server.go, getMetricBucket), summed
// over its other labels: upper bounds and cumulative counts.
func (k rdKubelet) statsHistogram(ctx context.Context) (map[float64]uint64, error) {
	const name = "kubelet_http_requests_duration_seconds"
	fams, err := k.get(ctx, "/metrics", name)
	if err != nil {
		return nil, err
	}
	out := map[float64]uint64{math.Inf(1): 0}
	for _, m := range fams[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["method"] != http.MethodGet || (labels["path"] != "stats" && labels["path"] != "metrics/resource") {
			continue
		}
		out[math.Inf(1)] += m.GetHistogram().GetSampleCount()
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the count, above
				out[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	return out, nil
}

// rdLongestRequest is the smallest bucket bound that holds every request
// counted between two readings of the histogram, and how many there were.
func rdLongestRequest(before, after map[float64]uint64) (time.Duration, uint64, error) {
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total == 0 {
		return 0, 0, fmt.Errorf("the kubelet counted no request for its stats")
	}
	for _, le := range slices.Sorted(maps.Keys(after)) {
		if after[le]-before[le] == total && !math.IsInf(le, 1) {
			return time.Duration(le * float64(time.Second)), total, nil
		}
	}
	return 0, total, fmt.Errorf("a request for the kubelet's stats took longer than its histogram's largest bucket: before %v, after %v", before, after)
}

// rdCgroups are a container's cpuacct and memory cgroup directories.
type rdCgroups struct{ cpuacct, memory string }

// rdTruth is one reading of a container's cgroup, taken between t0 and t1.
type rdTruth struct {
	t0, t1     time.Time
	cpu        int64 // cpuacct.usage, ns
	workingSet int64
}

// rdTruthSampler reads every pod's cgroups every rdTruthPeriod.
type rdTruthSampler struct {
	mu      sync.Mutex
	samples map[string][]rdTruth
	halt    func() // idempotent
}

func rdStartTruth(ctx context.Context, pods map[string]rdCgroups) *rdTruthSampler {
	s := &rdTruthSampler{samples: map[string][]rdTruth{}}
	s.halt = background(ctx, rdTruthPeriod, func(context.Context) {
		for key, c := range pods {
			if r, err := rdReadCgroups(c); err == nil {
				s.mu.Lock()
				s.samples[key] = append(s.samples[key], r)
				s.mu.Unlock()
			}
		}
	})
	return s
}

func rdReadCgroups(c rdCgroups) (rdTruth, error) {
	r := rdTruth{t0: time.Now()}
	cpu, err1 := readCounter(filepath.Join(c.cpuacct, "cpuacct.usage"))
	usage, err2 := readCounter(filepath.Join(c.memory, "memory.usage_in_bytes"))
	stat, err3 := os.ReadFile(filepath.Join(c.memory, "memory.stat"))
	r.t1 = time.Now()
	if err := errors.Join(err1, err2, err3); err != nil {
		return r, err
	}
	var inactive int64
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			inactive, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	r.cpu, r.workingSet = cpu, max(0, usage-inactive) // containerd's getWorkingSet
	return r, nil
}

// began is when every pod's first reading had been taken.
func (s *rdTruthSampler) began() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for _, tr := range s.samples {
		if len(tr) > 0 && tr[0].t1.After(t) {
			t = tr[0].t1
		}
	}
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// latest is the earliest of the pods' last readings' starts.
func (s *rdTruthSampler) latest() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for _, tr := range s.samples {
		if len(tr) == 0 {
			return time.Time{}
		}
		if l := tr[len(tr)-1].t0; t.IsZero() || l.Before(t) {
			t = l
		}
	}
	return t
}

func (s *rdTruthSampler) stop() map[string][]rdTruth {
	s.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// rdBelow is a lower bound of the CPU counter at x: the last reading
// finished by x.
func rdBelow(tr []rdTruth, x time.Time) (int64, bool) {
	i := sort.Search(len(tr), func(i int) bool { return tr[i].t1.After(x) })
	if i == 0 {
		return 0, false
	}
	return tr[i-1].cpu, true
}

// rdAbove is an upper bound of the CPU counter at x: the first reading
// begun at or after x.
func rdAbove(tr []rdTruth, x time.Time) (int64, bool) {
	i := sort.Search(len(tr), func(i int) bool { return !tr[i].t0.Before(x) })
	if i == len(tr) {
		return 0, false
	}
	return tr[i].cpu, true
}

// rdMemoryRange is the range of the working set read from the last reading
// finished by from to the first begun after to.
func rdMemoryRange(tr []rdTruth, from, to time.Time) (lo, hi int64, ok bool) {
	i := sort.Search(len(tr), func(i int) bool { return tr[i].t1.After(from) })
	j := sort.Search(len(tr), func(i int) bool { return !tr[i].t0.Before(to) })
	if i == 0 || j == len(tr) {
		return 0, 0, false
	}
	lo, hi = math.MaxInt64, math.MinInt64
	for _, r := range tr[i-1 : j+1] {
		lo, hi = min(lo, r.workingSet), max(hi, r.workingSet)
	}
	return lo, hi, true
}
