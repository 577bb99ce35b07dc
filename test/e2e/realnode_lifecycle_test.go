//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// The lifecycle cases run a container through what the kubelet does to it
// and check every PodMetrics the server serves meanwhile. The kubelet
// v1.37.2 (pkg/kubelet/stats/cri_stats_provider.go) reports only running
// containers (removeTerminatedContainers), each with its creation time as
// startTime, and no pod while none of its containers runs. The HPA
// (pkg/controller/podautoscaler/metrics/client.go, getPodMetrics;
// replica_calculator.go) sums every container a PodMetrics lists against the
// requests of the spec's containers and restartable init containers
// (calculatePodRequestsFromContainers), counts a pod that is neither
// pending, failed nor deleted and has no PodMetrics as missing (0% of its
// request on a scale-up, 100% on a scale-down, groupPods), and takes what it
// is served as the pod's usage: a spike scales up, a reading of the wrong pod
// or container misleads it.
//
// lcLife is how long a crashing or OOM-killed container runs: the kubelet
// restarts a container at its first exit at once, then after 10 s, 20 s, ...
// (pkg/kubelet/kubelet.go initialCrashLoopBackOff;
// ReduceDefaultCrashLoopBackOffDecay, which makes it 1 s, is alpha and off;
// kuberuntime_manager.go doBackOff), so the first two runs follow each other.
// The server scrapes every 5 s: 12 s hold two scrapes 5 s apart (a rate)
// whatever their phase, with 2 s to spare.
const lcLife = 12 * time.Second

// lcPollInterval is how often the cases read the metrics API and the pods.
const lcPollInterval = 500 * time.Millisecond

// checkRealLifecycle runs the four lifecycle cases at once, each on pods of
// its own in rn.ns, and deletes the pods when they are done.
func checkRealLifecycle(ctx context.Context, t *testing.T, rn *realNodeEnv) {
	began := time.Now()
	mc, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	e := &lcEnv{rn: rn, mc: mc}
	node := rn.node.Name()
	life := strconv.Itoa(int(lcLife.Seconds()))
	crash := realPod(rn.ns, "lc-crash", node, "yes >/dev/null & sleep "+life+"; exit 1", cpuLimit, "32Mi")
	// busybox dd allocates its 64 MiB block (anonymous memory) and fills it
	// from /dev/zero: the charge passes the limit and the memory cgroup's OOM
	// killer kills dd, the container's only process.
	oom := realPod(rn.ns, "lc-oom", node, "sleep "+life+"; exec dd if=/dev/zero of=/dev/null bs=64M count=1", cpuLimit, lcOOMLimit)
	recreate := realPod(rn.ns, "lc-recreate", node, "yes >/dev/null", cpuLimit, "32Mi")
	pods := []*corev1.Pod{crash, oom, lcSidecarPod(rn.ns, node), recreate}
	for _, p := range pods {
		_, err := suite.cluster.Client().CoreV1().Pods(rn.ns).Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	t.Cleanup(func() { e.deletePods(t, pods) })

	cases := []struct {
		name string
		run  func(context.Context, *testing.T)
	}{
		{"crash-restart", func(ctx context.Context, t *testing.T) { e.crashRestart(ctx, t, crash.Name) }},
		{"oom-kill", func(ctx context.Context, t *testing.T) { e.oomKill(ctx, t, oom.Name) }},
		{"init-sidecar", e.initSidecar},
		{"recreate", e.recreate},
	}
	// All at once, so that their waits overlap; t.Run may be called from
	// several goroutines, and these are not t.Parallel, which -parallel
	// (GOMAXPROCS) would cap.
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() { t.Run(c.name, func(t *testing.T) { c.run(ctx, t) }) })
	}
	wg.Wait()
	t.Logf("lifecycle cases done in %v", since(began))
}

type lcEnv struct {
	rn *realNodeEnv
	mc metricsclient.Interface
}

// poll calls check every lcPollInterval until it returns nil, for at most
// d, failing early if the control plane, the server or the node stops.
func (e *lcEnv) poll(ctx context.Context, d time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return cluster.PollUntil(ctx, what, lcPollInterval, 10*time.Second, append(watched(), e.rn.node.Processes()...), check)
}

func (e *lcEnv) pod(ctx context.Context, name string) (*corev1.Pod, error) {
	return suite.cluster.Client().CoreV1().Pods(e.rn.ns).Get(ctx, name, metav1.GetOptions{})
}

// gone returns nil once the pod name is deleted.
func (e *lcEnv) gone(ctx context.Context, name string) error {
	if _, err := e.pod(ctx, name); err == nil {
		return fmt.Errorf("pod %s still exists", name)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// deletePods deletes the pods at once and waits until they are gone, so that
// the cases after this one share the node with none of them.
func (e *lcEnv) deletePods(t *testing.T, pods []*corev1.Pod) {
	ctx, cancel := context.WithTimeout(suite.ctx, time.Minute)
	defer cancel()
	for _, p := range pods {
		err := suite.cluster.Client().CoreV1().Pods(e.rn.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", p.Name, err)
		}
	}
	for _, p := range pods {
		gone := func(ctx context.Context) error { return e.gone(ctx, p.Name) }
		if err := e.poll(ctx, time.Minute, "pod "+p.Name+" to be deleted", gone); err != nil {
			t.Error(err)
		}
	}
}

// lcReading is a PodMetrics as served.
type lcReading struct{ pm metricsv1beta1.PodMetrics }

func (r lcReading) from() time.Time { return r.pm.Timestamp.Add(-r.pm.Window.Duration) }

func (r lcReading) String() string {
	var cs []string
	for _, c := range r.pm.Containers {
		cs = append(cs, fmt.Sprintf("%s cpu %.1fm memory %.2f MiB", c.Name,
			float64(c.Usage.Cpu().ScaledValue(resource.Nano))/1e6, float64(c.Usage.Memory().Value())/(1<<20)))
	}
	return fmt.Sprintf("window %v..%v (%v): %s", r.from().Format(time.TimeOnly), r.pm.Timestamp.Format(time.TimeOnly),
		r.pm.Window.Duration, strings.Join(cs, "; "))
}

// lcRecorder keeps every distinct PodMetrics the server serves for one pod,
// and logs each, and each change between served and not found, as it sees
// it.
type lcRecorder struct {
	t        *testing.T
	mc       metricsclient.Interface
	ns, name string
	began    time.Time
	readings []lcReading
	missing  bool
}

func (e *lcEnv) recorder(t *testing.T, name string) *lcRecorder {
	return &lcRecorder{t: t, mc: e.mc, ns: e.rn.ns, name: name, began: time.Now()}
}

// read reads the PodMetrics once and records it if it is new.
func (r *lcRecorder) read(ctx context.Context) error {
	pm, err := r.mc.MetricsV1beta1().PodMetricses(r.ns).Get(ctx, r.name, metav1.GetOptions{})
	at := time.Since(r.began).Round(100 * time.Millisecond)
	switch {
	case apierrors.IsNotFound(err):
		if !r.missing {
			r.t.Logf("%s at +%v: no PodMetrics (%v)", r.name, at, err)
		}
		r.missing = true
		return nil
	case err != nil:
		return err
	}
	r.missing = false
	if n := len(r.readings); n > 0 {
		last := r.readings[n-1].pm
		same := last.Timestamp.Equal(&pm.Timestamp) && last.Window == pm.Window
		if same && apiequality.Semantic.DeepEqual(last.Containers, pm.Containers) {
			return nil
		}
	}
	r.readings = append(r.readings, lcReading{pm: *pm})
	r.t.Logf("%s at +%v: %v", r.name, at, r.readings[len(r.readings)-1])
	return nil
}

// waitReadings reads until ready, given the readings so far, returns nil.
func (r *lcRecorder) waitReadings(ctx context.Context, e *lcEnv, d time.Duration, what string, ready func() error) error {
	return e.poll(ctx, d, what, func(ctx context.Context) error {
		if err := r.read(ctx); err != nil {
			return err
		}
		return ready()
	})
}

// lcContainer returns the named container's CPU in nanocores and memory in
// bytes, and whether the reading lists it.
func lcContainer(pm *metricsv1beta1.PodMetrics, name string) (nanoCores, bytes int64, ok bool) {
	for _, c := range pm.Containers {
		if c.Name == name {
			return c.Usage.Cpu().ScaledValue(resource.Nano), c.Usage.Memory().Value(), true
		}
	}
	return 0, 0, false
}

// lcCheckNames fails unless the reading lists exactly the containers want,
// in any order.
func lcCheckNames(t *testing.T, pod string, r lcReading, want ...string) {
	t.Helper()
	var got []string
	for _, c := range r.pm.Containers {
		got = append(got, c.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: the reading %v lists containers %q, want %q", pod, r, got, want)
	}
}

// lcCheckCFS fails unless the reading lists the one container, name, with
// a CPU of at least 0 and at most the CFS bound of cpuLimit over its window
// (cpuBounds), which it returns.
func lcCheckCFS(t *testing.T, name string, r lcReading) (hi float64) {
	t.Helper()
	lcCheckNames(t, name, r, name)
	_, hi = cpuBounds(r.pm.Window.Duration, 0)
	n, _, ok := lcContainer(&r.pm, name)
	if cores := float64(n) / 1e9; ok && (cores < 0 || cores > hi) {
		t.Errorf("%s: container %s reads %.1fm in the reading %v, want 0..%.1fm (the CFS bound of %s)", name, name, cores*1e3, r, hi*1e3, cpuLimit)
	}
	return hi
}

// lcCPUWithin says whether nanoCores over w is at most counter
// core-nanoseconds: the server divides a counter's increase by the window
// and rounds down (pkg/store/series.go, rate), so a reading never exceeds
// what the counter could have grown by. Exact, in integers.
func lcCPUWithin(nanoCores int64, w time.Duration, counter int64) bool {
	lhs := new(big.Int).Mul(big.NewInt(nanoCores), big.NewInt(w.Nanoseconds()))
	return lhs.Cmp(new(big.Int).Mul(big.NewInt(counter), big.NewInt(1e9))) <= 0
}

// summaryContainers returns the names of the containers the kubelet's
// Summary lists for the pod, read as the server reads it.
func (e *lcEnv) summaryContainers(ctx context.Context, pod string) ([]string, error) {
	token, err := saToken(ctx, e.rn.server.Namespace, e.rn.server.ServiceAccount)
	if err != nil {
		return nil, err
	}
	code, body, err := kubeletGet(ctx, e.rn.node, "/stats/summary?only_cpu_and_memory=true", token)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("summary: %d %s", code, body)
	}
	var s statsv1alpha1.Summary
	if err == nil {
		err = json.Unmarshal(body, &s)
	}
	if err != nil {
		return nil, err
	}
	for _, p := range s.Pods {
		if p.PodRef.Namespace == e.rn.ns && p.PodRef.Name == pod {
			var names []string
			for _, c := range p.Containers {
				names = append(names, c.Name)
			}
			slices.Sort(names)
			return names, nil
		}
	}
	return nil, errors.New("the summary lists no pod " + pod)
}

// lcRun is one run of a container, from its start to its finish (zero while
// it runs), to the second the API keeps.
type lcRun struct {
	id                string
	started, finished time.Time
	exit              string
}

// lcRuns are a container's runs, in order, as the test saw its status.
type lcRuns []lcRun

// observe records the runs a container status names: the current one and
// the one before it.
func (rs *lcRuns) observe(cs corev1.ContainerStatus) {
	set := func(id string, started, finished time.Time, exit string) {
		i := slices.IndexFunc(*rs, func(r lcRun) bool { return r.id == id })
		if i < 0 {
			*rs = append(*rs, lcRun{id: id})
			i = len(*rs) - 1
		}
		(*rs)[i].started, (*rs)[i].finished, (*rs)[i].exit = started, finished, exit
		slices.SortFunc(*rs, func(a, b lcRun) int { return a.started.Compare(b.started) })
	}
	term := func(id string, s *corev1.ContainerStateTerminated) {
		set(id, s.StartedAt.Time, s.FinishedAt.Time, fmt.Sprintf("exit %d (%s)", s.ExitCode, s.Reason))
	}
	if s := cs.LastTerminationState.Terminated; s != nil {
		term(s.ContainerID, s)
	}
	switch s := cs.State; {
	case s.Running != nil:
		set(cs.ContainerID, s.Running.StartedAt.Time, time.Time{}, "")
	case s.Terminated != nil:
		term(cs.ContainerID, s.Terminated)
	}
}

// of returns the run whose lifetime holds the reading's window, or -1. A
// run's samples are taken after the run before it finished and before it
// finishes itself; all times are whole seconds, so a window that reached
// back into the run before by less than a second cannot be told.
func (rs lcRuns) of(r lcReading) int {
	for i, run := range rs {
		if i > 0 && r.from().Before(rs[i-1].finished) {
			continue
		}
		if run.finished.IsZero() || !r.pm.Timestamp.After(run.finished) {
			return i
		}
	}
	return -1
}

func (rs lcRuns) String() string {
	var out []string
	for i, r := range rs {
		s := fmt.Sprintf("run %d %s..", i+1, r.started.Format(time.TimeOnly))
		if !r.finished.IsZero() {
			s += r.finished.Format(time.TimeOnly) + " " + r.exit
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// watchRuns polls the pod name's one container's runs and PodMetrics until
// done returns nil, and returns the runs and the restarts.
func (e *lcEnv) watchRuns(ctx context.Context, t *testing.T, rec *lcRecorder, what string,
	done func(lcRuns, corev1.ContainerStatus) error) (lcRuns, int32) {
	var runs lcRuns
	var restarts int32
	err := e.poll(ctx, 90*time.Second, rec.name+" to "+what, func(ctx context.Context) error {
		p, err := e.pod(ctx, rec.name)
		if err != nil {
			return err
		}
		if err := rec.read(ctx); err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("container statuses %v", p.Status.ContainerStatuses)
		}
		cs := p.Status.ContainerStatuses[0]
		runs.observe(cs)
		restarts = cs.RestartCount
		return done(runs, cs)
	})
	t.Logf("%s: %d restarts; %v", rec.name, restarts, runs)
	must(t, err)
	return runs, restarts
}

// crashRestart: a container burns CPU at its limit for lcLife and exits 1;
// the kubelet restarts it at once. The server sees the new run's counter
// start again at zero with a start time after its last sample, so it takes
// the run as a new series (pkg/store/series.go, next and restarted, as
// metrics-server v0.8.0 does, pkg/storage/pod.go Store): no window joins two
// runs. Until the new run has a rate the last run's is served, until it is
// stale (2 resolutions and the timeout). A start time and a sample in the
// same second cannot be ordered, so a run whose first sample falls in the
// second it started in counts as restarted at its second sample too, and has
// its first rate a scrape later. Every reading is within cpuBounds' CFS
// bound, and its window lies in one run.
func (e *lcEnv) crashRestart(ctx context.Context, t *testing.T, name string) {
	rec := e.recorder(t, name)
	runs, restarts := e.watchRuns(ctx, t, rec, "be read across a restart", func(runs lcRuns, _ corev1.ContainerStatus) error {
		seen := map[int]bool{}
		for _, r := range rec.readings {
			seen[runs.of(r)] = true
		}
		if len(runs) < 2 || !seen[0] || !seen[1] {
			return fmt.Errorf("readings of runs %v; runs: %v", seen, runs)
		}
		return nil
	})
	for _, r := range rec.readings {
		i := runs.of(r)
		hi := lcCheckCFS(t, name, r)
		t.Logf("%s: run %d, %v; accepted 0..%.1fm", name, i+1, r, hi*1e3)
		if i < 0 {
			t.Errorf("%s: the window of %v spans runs %v", name, r, runs)
		}
	}
	if restarts < 1 || runs[0].exit != "exit 1 (Error)" {
		t.Errorf("%s: %d restarts, first run %q; want a restart after exit 1 (Error)", name, restarts, runs[0].exit)
	}
}

// The OOM case's memory limit, and what a reading of it may show above it.
// The working set containerd reports is memory.usage_in_bytes −
// total_inactive_file; usage_in_bytes is the memory cgroup's page counter,
// which the kernel keeps at or under the limit (mm/memcontrol.c,
// try_charge_memcg: page_counter_try_charge fails, reclaim, then the OOM
// killer) but for forced charges: an allocation made in reclaim, or one that
// may not fail or draws on reserves, is charged past the limit, each the
// pages of that one allocation: chargeBatches allows them.
const lcOOMLimit = "32Mi"

// oomKill: a container sleeps for lcLife, then dd fills a block twice its
// memory limit and the kernel kills it. The kubelet reports the run's end as
// OOMKilled (containerd's CRI plugin sets the reason from the cgroup's OOM
// event) and restarts it. Every reading served meanwhile is within the limit
// and chargeBatches and the CFS bound of its CPU limit.
func (e *lcEnv) oomKill(ctx context.Context, t *testing.T, name string) {
	rec := e.recorder(t, name)
	runs, _ := e.watchRuns(ctx, t, rec, "be OOM-killed and restarted, and read", func(_ lcRuns, cs corev1.ContainerStatus) error {
		if cs.RestartCount < 1 || cs.LastTerminationState.Terminated == nil || cs.State.Running == nil {
			return fmt.Errorf("%d restarts, state %+v, last state %+v", cs.RestartCount, cs.State, cs.LastTerminationState)
		}
		if len(rec.readings) == 0 {
			return errors.New("no reading yet")
		}
		return nil
	})
	if runs[0].exit != "exit 137 (OOMKilled)" {
		t.Errorf("%s: the first run ended with %s, want exit 137 (OOMKilled)", name, runs[0].exit)
	}
	limit := resource.MustParse(lcOOMLimit)
	hiMem := limit.Value() + chargeBatches()
	for _, r := range rec.readings {
		hi := lcCheckCFS(t, name, r)
		t.Logf("%s: run %d, %v; accepted cpu 0..%.1fm, memory 0..%.2f MiB", name, runs.of(r)+1, r, hi*1e3, float64(hiMem)/(1<<20))
		if _, mem, _ := lcContainer(&r.pm, name); mem < 0 || mem > hiMem {
			t.Errorf("%s: memory %d bytes in %v, want 0..%d (limit %s)", name, mem, r, hiMem, lcOOMLimit)
		}
	}
}

// lcSidecarPod runs, in order, an init container that burns CPU for 2 s and
// exits 0, a restartable init container (a sidecar) running yes at
// cpuLimit, and a main container that sleeps.
func lcSidecarPod(ns, node string) *corev1.Pod {
	p := realPod(ns, "lc-sidecar", node, "exec sleep 2147483647", "100m", "32Mi")
	main := &p.Spec.Containers[0]
	main.Name = "main"
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLimit), corev1.ResourceMemory: resource.MustParse("32Mi")}
	init := func(name, script string, restart *corev1.ContainerRestartPolicy) corev1.Container {
		c := *main.DeepCopy()
		c.Name, c.Command, c.RestartPolicy = name, []string{"sh", "-c", script}, restart
		c.Resources = corev1.ResourceRequirements{Requests: res, Limits: res}
		return c
	}
	p.Spec.InitContainers = []corev1.Container{
		init("init", "yes >/dev/null & sleep 2; kill $!", nil),
		init("sidecar", "yes >/dev/null", ptr.To(corev1.ContainerRestartPolicyAlways)),
	}
	return p
}

// initSidecar: the kubelet's Summary lists the running containers only, the
// sidecar and main and not the finished init container; metrics-server
// serves what /metrics/resource lists, the same containers (the kubelet's
// resource metrics collector reads the same stats provider,
// pkg/kubelet/metrics/collectors/resource_metrics.go), and the HPA sums them
// against main's and the sidecar's requests. Every reading lists exactly main
// and sidecar; the sidecar's CPU is within the CPU case's bounds, and main's
// at most what its cgroup's counter holds when the test stops.
//
// The pod's window is that of its container sampled earliest, which may be
// main: containerd samples a pod's containers one task after another
// (plugins/services/tasks/local.go, getTasksMetrics, each timestamp taken
// before its shim's Stats call), so the sidecar's samples were taken within
// spread of main's, two sampleSkews (a call's timestamp to its read, and the
// rest of the call) for each task on the node. The sidecar's true window then
// lies in [T−W−spread, T+R+spread) and holds [T−W+R+spread, T−spread]. Main's
// own window is at least W−R: its and the sidecar's samples fall in the same
// second or the next one.
func (e *lcEnv) initSidecar(ctx context.Context, t *testing.T) {
	const name = "lc-sidecar"
	rec := e.recorder(t, name)
	mainStarted, sidecarID, mainID := e.waitSidecarPod(ctx, t, rec)
	sidecarDir, tasks, err := taskCgroup(ctx, e.rn.node, sidecarID, "cpu")
	must(t, err)
	mainDir, _, err := taskCgroup(ctx, e.rn.node, mainID, "cpuacct")
	must(t, err)
	spread := time.Duration(tasks) * 2 * sampleSkew
	stop := sampleThrottling(sidecarDir)
	after := maxTime(time.Now(), mainStarted.Add(time.Second))
	var checked []lcReading
	err = rec.waitReadings(ctx, e, time.Minute, "2 readings of "+name+" after its main container started", func() error {
		checked = slices.DeleteFunc(slices.Clone(rec.readings), func(r lcReading) bool { return !r.from().After(after) })
		if len(checked) < 2 {
			return fmt.Errorf("%d of 2 readings", len(checked))
		}
		return nil
	})
	samples := stop()
	must(t, err)
	mainCPU, err := readCounter(filepath.Join(mainDir, "cpuacct.usage"))
	must(t, err)

	names, err := e.summaryContainers(ctx, name)
	must(t, err)
	t.Logf("%s: the kubelet's Summary lists containers %q", name, names)
	if !slices.Equal(names, []string{"main", "sidecar"}) {
		t.Errorf("%s: the kubelet's Summary lists containers %q, want main and sidecar", name, names)
	}
	for _, r := range rec.readings {
		lcCheckNames(t, name, r, "main", "sidecar")
	}
	for _, r := range checked {
		lcCheckSidecarReading(t, name, r, samples, spread, mainCPU)
	}
}

// waitSidecarPod waits until the sidecar pod runs its sidecar and main
// container after its init container exited 0, reading its PodMetrics
// meanwhile, and returns when main started and the two containers' IDs.
func (e *lcEnv) waitSidecarPod(ctx context.Context, t *testing.T, rec *lcRecorder) (mainStarted time.Time, sidecarID, mainID string) {
	name := rec.name
	must(t, rec.waitReadings(ctx, e, 2*time.Minute, name+" to run its sidecar and main container after its init container", func() error {
		p, err := e.pod(ctx, name)
		if err != nil {
			return err
		}
		var init, sidecar, main *corev1.ContainerStatus
		for i, s := range p.Status.InitContainerStatuses {
			switch s.Name {
			case "init":
				init = &p.Status.InitContainerStatuses[i]
			case "sidecar":
				sidecar = &p.Status.InitContainerStatuses[i]
			}
		}
		if len(p.Status.ContainerStatuses) == 1 {
			main = &p.Status.ContainerStatuses[0]
		}
		if p.Status.Phase != corev1.PodRunning || init == nil || init.State.Terminated == nil ||
			sidecar == nil || sidecar.State.Running == nil || main == nil || main.State.Running == nil {
			return fmt.Errorf("pod %s: %s, init containers %+v, containers %+v", name, p.Status.Phase, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
		}
		if s := init.State.Terminated; s.ExitCode != 0 || s.Reason != "Completed" {
			return fmt.Errorf("init container: exit %d (%s), want 0 (Completed)", s.ExitCode, s.Reason)
		}
		mainStarted, sidecarID, mainID = main.State.Running.StartedAt.Time, sidecar.ContainerID, main.ContainerID
		t.Logf("%s: init container exit 0 (Completed) %s..%s, sidecar since %s, main since %s", name,
			init.State.Terminated.StartedAt.Format(time.TimeOnly), init.State.Terminated.FinishedAt.Format(time.TimeOnly),
			sidecar.State.Running.StartedAt.Format(time.TimeOnly), mainStarted.Format(time.TimeOnly))
		return nil
	}))
	return mainStarted, sidecarID, mainID
}

// lcCheckSidecarReading checks a reading of the sidecar pod whose window
// began after main started: the sidecar within the CPU case's bounds widened
// by spread, main within mainCPU (its counter when the test stopped) over at
// least W−R.
func lcCheckSidecarReading(t *testing.T, pod string, r lcReading, samples []throttling, spread time.Duration, mainCPU int64) {
	t.Helper()
	T, w := r.pm.Timestamp.Time, r.pm.Window.Duration
	var m, periods int64
	if w > summaryTimeResolution+2*spread {
		var ok bool
		if m, periods, ok = throttledWithin(samples, T.Add(summaryTimeResolution+spread-w), T.Add(-spread)); !ok {
			t.Errorf("%s: no cpu.stat readings of the sidecar inside the window of %v", pod, r)
		}
	}
	lo, hi := cpuBounds(w, m)
	hi += 2 * spread.Seconds() / cfsPeriod.Seconds() * cpuQuota.Seconds() / w.Seconds()
	mainW := max(w-summaryTimeResolution, summaryTimeResolution)
	t.Logf("%s: %v; sidecar throttled in %d of the %d periods surely inside it (spread %v), accepted %.1fm..%.1fm; main accepted 0..%.1fm (cpuacct.usage %d ns over %v)",
		pod, r, m, periods, spread, lo*1e3, hi*1e3, float64(mainCPU)/mainW.Seconds()/1e6, mainCPU, mainW)
	if n, _, ok := lcContainer(&r.pm, "sidecar"); ok {
		if cores := float64(n) / 1e9; cores < lo || cores > hi {
			t.Errorf("%s: sidecar cpu %.1fm in %v, want %.1fm..%.1fm", pod, cores*1e3, r, lo*1e3, hi*1e3)
		}
	}
	if n, _, ok := lcContainer(&r.pm, "main"); ok && (n < 0 || !lcCPUWithin(n, mainW, mainCPU)) {
		t.Errorf("%s: main cpu %dn in %v, want at most %d ns of CPU over %v", pod, n, r, mainCPU, mainW)
	}
}

// recreate: a pod running yes at its limit is deleted and created again
// under its name, a new UID, running sleep, as a LeaderWorkerSet recreates a
// group's pods. The server keys a pod's samples by namespace and name and
// drops them when the kubelet reports another UID (pkg/store/store.go,
// Store), and serves a pod only from samples of the UID its pod cache holds
// (pkg/store/read.go, Pod): no window joins the two pods' counters, and none
// of the old pod is served for the new one. metrics-server v0.8.0 keys by
// name alone and tells the new pod by its containers' start times, as a
// restart (pkg/storage/pod.go). Every reading is within the CFS bound of the
// limit; every reading after the new pod was created has a window that
// begins after that, and is at most what the new container's cgroup counter
// holds when the test stops, over the window (lcCPUWithin): near zero.
func (e *lcEnv) recreate(ctx context.Context, t *testing.T) {
	const name = "lc-recreate"
	client := suite.cluster.Client()
	rec := e.recorder(t, name)
	must(t, rec.waitReadings(ctx, e, 2*time.Minute, "a reading of the first "+name, func() error {
		if len(rec.readings) == 0 {
			return errors.New("no reading yet")
		}
		return nil
	}))
	old, err := e.pod(ctx, name)
	must(t, err)
	must(t, client.CoreV1().Pods(e.rn.ns).Delete(ctx, name, metav1.DeleteOptions{}))
	must(t, rec.waitReadings(ctx, e, time.Minute, "the first "+name+" to be deleted", func() error {
		return e.gone(ctx, name)
	}))
	oldReadings := len(rec.readings)
	replacement := realPod(e.rn.ns, name, e.rn.node.Name(), "exec sleep 2147483647", cpuLimit, "32Mi")
	created, err := client.CoreV1().Pods(e.rn.ns).Create(ctx, replacement, metav1.CreateOptions{})
	must(t, err)
	t.Logf("%s: deleted UID %s, created UID %s at %s", name, old.UID, created.UID, created.CreationTimestamp.Format(time.TimeOnly))
	var dir string
	must(t, rec.waitReadings(ctx, e, 2*time.Minute, "2 readings of the new "+name, func() error {
		if dir == "" {
			p, err := e.pod(ctx, name)
			if err != nil {
				return err
			}
			if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
				return fmt.Errorf("the new pod's container does not run yet: %+v", p.Status.ContainerStatuses)
			}
			if dir, _, err = taskCgroup(ctx, e.rn.node, p.Status.ContainerStatuses[0].ContainerID, "cpuacct"); err != nil {
				return err
			}
		}
		if n := len(rec.readings) - oldReadings; n < 2 {
			return fmt.Errorf("%d of 2 readings", n)
		}
		return nil
	}))
	counter, err := readCounter(filepath.Join(dir, "cpuacct.usage"))
	must(t, err)
	for i, r := range rec.readings {
		hi := lcCheckCFS(t, name, r)
		if i < oldReadings {
			t.Logf("%s: old pod, %v; accepted 0..%.1fm", name, r, hi*1e3)
			continue
		}
		t.Logf("%s: new pod, %v; accepted 0..%.1fm (cpuacct.usage %d ns over the window)", name, r, float64(counter)/r.pm.Window.Seconds()/1e6, counter)
		if r.from().Before(created.CreationTimestamp.Time) {
			t.Errorf("%s: %v was served after the pod was recreated at %s, and its window begins before", name, r, created.CreationTimestamp.Format(time.TimeOnly))
		}
		if n, _, _ := lcContainer(&r.pm, name); !lcCPUWithin(n, r.pm.Window.Duration, counter) {
			t.Errorf("%s: %v is more than the new container's %d ns of CPU over its window", name, r, counter)
		}
	}
}
