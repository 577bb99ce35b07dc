//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/store"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// The CPU case: one container limited to cpuLimit runs `yes`, always
// runnable, so CFS bandwidth control (cgroup v1 cpu.cfs_quota_us 25000 of
// cpu.cfs_period_us 100000) gives it at most cpuQuota in each cfsPeriod.
//
// The server reports C/W: C the difference of the container's cumulative CPU
// between two kubelet samples, W that of their timestamps. containerd's CRI
// ContainerStats reads the cgroup when asked, so C is exact; but the Summary
// carries a sample's time as a metav1.Time, whole seconds in JSON (the
// kubelet-authorization case checks this). The reported window [T−W, T] then
// stands for samples at s in [T−W, T−W+R) and e in [T, T+R), R =
// summaryTimeResolution: W is off by up to R either way, ±20% of 5 s. (Ticks
// that keep their phase within the second cancel the errors; the first
// windows, and a tick whose phase crosses a second, do not.) With Q =
// cpuQuota, P = cfsPeriod:
//
//   - Above: in under W + R the task uses at most (W + R)/P·Q + Q, the +Q a
//     period straddling the edges (an overrun by up to a scheduler tick is
//     repaid from the next period), plus sampleSkew at each end between
//     containerd's timestamp and its read. The kernel's bound, on any
//     machine: 307m for W = 5 s.
//   - Below: in a period the kernel throttled the cgroup in, the task used
//     its whole quota. [T−W+R, T] lies within [s, e]; the test reads cpu.stat
//     every 20 ms, and of m throttled periods counted between readings inside
//     it at most one began before it, so C ≥ (m − 1)·Q − 2·sampleSkew: 193m
//     for W = 5 s on a quiet machine (m = 40). A busy machine throttles the
//     task in fewer periods and the bound falls with what the kernel gave it:
//     the test never asks for CPU the container did not get.
const (
	cpuLimit              = "250m"
	cpuQuota              = 25 * time.Millisecond
	cfsPeriod             = 100 * time.Millisecond
	sampleSkew            = 5 * time.Millisecond
	summaryTimeResolution = time.Second
)

// The memory case: the container writes memFill MiB of zeros with dd into a
// memory-backed emptyDir (tmpfs) and sleeps. tmpfs pages are shared memory:
// without swap they cannot be reclaimed and sit on the anonymous LRU lists,
// so the working set (cgroup v1 memory.usage_in_bytes − total_inactive_file)
// keeps all of them, charged to the writer's cgroup; a file on the overlay
// root would be page cache the kernel may count inactive and drop. memSlack
// bounds the rest: busybox's text (under 2 MiB), stacks, heaps, page tables
// and chargeBatches (64 pages a CPU). Below memFill is impossible.
const (
	memFill  = 64 // MiB
	memSlack = 6  // MiB
)

// TestRealNode runs pods on a real kubelet and container runtime that join
// the suite's cluster, and checks what a server of its own (the suite's
// manifests, verifying both the fake kubelets' and the real kubelet's
// certificates) serves for them through metrics.k8s.io and kubectl top,
// and that the kubelet's webhook authorization is the server's RBAC.
func TestRealNode(t *testing.T) {
	ctx := begin(t, 10*time.Minute)
	began := time.Now()
	n := startRealNode(ctx, t)
	const ns = "e2e-realnode"
	newNamespace(ctx, t, ns)
	kubeletCA := kubeletCABundle(t)
	s := deployOwnServer(ctx, t, "gms-realnode", []string{"--kubelet-certificate-authority=" + kubeletCA})

	burn := realPod(ns, "burn", n.Name(), "yes >/dev/null", cpuLimit, "32Mi")
	fill := realPod(ns, "fill", n.Name(), fmt.Sprintf("dd if=/dev/zero of=/fill/zeros bs=1M count=%d && exec sleep 2147483647", memFill), "100m", "256Mi")
	fill.Spec.Volumes = []corev1.Volume{{Name: "fill", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory},
	}}}
	fill.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "fill", MountPath: "/fill"}}
	for _, p := range []*corev1.Pod{burn, fill} {
		_, err := suite.cluster.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	waitRunning(ctx, t, n, burn, fill)
	t.Logf("pods running %v after the test began", since(began))

	rn := &realNodeEnv{node: n, ns: ns, server: s, kubeletCA: kubeletCA}
	t.Run("cpu", func(t *testing.T) { checkRealCPU(ctx, t, n, ns, burn.Name) })
	t.Run("memory", func(t *testing.T) { checkRealMemory(ctx, t, ns, fill.Name) })
	t.Run("exec", func(t *testing.T) { checkExec(ctx, t, ns, burn.Name) })
	t.Run("kubelet-authorization", func(t *testing.T) { checkKubeletAuthorization(ctx, t, n, ns, s.Namespace, s.ServiceAccount) })
	t.Run("node", func(t *testing.T) { logRealNodeMetrics(ctx, t, n) })
	t.Run("metrics-server", func(t *testing.T) { checkRealDifferential(ctx, t, rn) })
	t.Run("kubelet-refuses-server", func(t *testing.T) { checkStrippedServer(ctx, t, rn) })
	t.Run("lifecycle", func(t *testing.T) { checkRealLifecycle(ctx, t, rn) })
	t.Run("lws-guide", func(t *testing.T) { checkLWSGuide(ctx, t, rn) })
	t.Logf("test body %v", since(began))
}

// realNodeEnv is what TestRealNode's cases share: the node, the namespace,
// the test's server (registered for metrics.k8s.io while the test runs) and
// the CA bundle that verifies both the fake kubelets and the real one.
type realNodeEnv struct {
	node      *cluster.RealNode
	ns        string
	server    *env.Server
	kubeletCA string
}

// cpuBounds returns the rate range in cores the CPU case accepts for a
// reported window w with throttled periods counted in its part that is
// surely inside the true one.
func cpuBounds(w time.Duration, throttled int64) (lo, hi float64) {
	q, p, skew, r, ws := cpuQuota.Seconds(), cfsPeriod.Seconds(), sampleSkew.Seconds(), summaryTimeResolution.Seconds(), w.Seconds()
	return max(0, (float64(throttled-1)*q-2*skew)/ws), ((ws+r)/p*q + q + 2*skew) / ws
}

// podReadings polls the pod's PodMetrics through the aggregator until it has
// want readings with distinct timestamps whose windows begin after after,
// and returns them.
func podReadings(ctx context.Context, t *testing.T, ns, name string, want int, after time.Time) []metricsv1beta1.PodMetrics {
	t.Helper()
	mc, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	var out []metricsv1beta1.PodMetrics
	// The server scrapes every 5 s.
	must(t, pollBounded(ctx, time.Duration(want+2)*10*time.Second, fmt.Sprintf("%d readings of pod %s", want, name), func(ctx context.Context) error {
		pm, err := mc.MetricsV1beta1().PodMetricses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(pm.Containers) != 1 {
			return fmt.Errorf("pod %s has %d containers in its metrics", name, len(pm.Containers))
		}
		if from := pm.Timestamp.Add(-pm.Window.Duration); !from.After(after) {
			return fmt.Errorf("window %v..%v begins before %v", from, pm.Timestamp, after)
		}
		if len(out) == 0 || !pm.Timestamp.Equal(&out[len(out)-1].Timestamp) {
			out = append(out, *pm)
		}
		if len(out) < want {
			return fmt.Errorf("%d of %d readings", len(out), want)
		}
		return nil
	}))
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func checkRealCPU(ctx context.Context, t *testing.T, n *cluster.RealNode, ns, name string) {
	pod, err := suite.cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	dir, _, err := taskCgroup(ctx, n, pod.Status.ContainerStatuses[0].ContainerID, "cpu")
	must(t, err)
	// The readings are of windows that begin after the first cpu.stat sample
	// and after the container started (the API's second, plus that second).
	stop := sampleThrottling(dir)
	after := maxTime(time.Now(), pod.Status.ContainerStatuses[0].State.Running.StartedAt.Add(time.Second))
	readings := podReadings(ctx, t, ns, name, 4, after)
	// The last window has ended by now; stop's last sample closes it.
	samples := stop()
	for _, pm := range readings {
		cores := float64(pm.Containers[0].Usage.Cpu().ScaledValue(-9)) / 1e9
		w := pm.Window.Duration
		if minW := store.MinWindow(suite.resolution); w < minW {
			t.Errorf("cpu of %s over a %v window ending %s: the store computes no rate over less than %v", name, w, pm.Timestamp.Format(time.RFC3339), minW)
		}
		var m, periods int64
		if w > summaryTimeResolution {
			var ok bool
			if m, periods, ok = throttledWithin(samples, pm.Timestamp.Add(summaryTimeResolution-w), pm.Timestamp.Time); !ok {
				t.Errorf("no cpu.stat readings of %s inside the window ending %s", dir, pm.Timestamp.Format(time.RFC3339))
				continue
			}
		}
		lo, hi := cpuBounds(w, m)
		t.Logf("cpu: %.1fm over a %v window ending %s; throttled in %d of the %d periods surely inside it; accepted %.1fm..%.1fm (limit %s)",
			cores*1e3, w, pm.Timestamp.Format(time.RFC3339), m, periods, lo*1e3, hi*1e3, cpuLimit)
		if cores < lo || cores > hi {
			t.Errorf("cpu of %s: %.1fm, want %.1fm..%.1fm", name, cores*1e3, lo*1e3, hi*1e3)
		}
	}
	checkTopAgrees(ctx, t, ns, name)
	checkHPAReads(ctx, t, ns, name, corev1.ResourceCPU)
}

func checkRealMemory(ctx context.Context, t *testing.T, ns, name string) {
	lo, hi := int64(memFill)<<20, int64(memFill+memSlack)<<20
	// busybox's dd says "64+0 records out" on stderr when it has written
	// everything; the readings are of windows that begin after that.
	// kubectl logs goes through kube-apiserver's kubelet client.
	var done time.Time
	must(t, pollBounded(ctx, time.Minute, "dd in "+name+" to finish", func(ctx context.Context) error {
		out, _, err := suite.cluster.Kubectl(ctx, "logs", "-n", ns, name)
		if err == nil && !strings.Contains(out, fmt.Sprintf("%d+0 records out", memFill)) {
			err = fmt.Errorf("dd's output so far: %q", out)
		}
		if err == nil {
			done = time.Now()
			t.Logf("kubectl logs %s: %s", name, strings.Join(strings.Fields(out), " "))
		}
		return err
	}))
	for _, pm := range podReadings(ctx, t, ns, name, 2, done) {
		ws := pm.Containers[0].Usage.Memory().Value()
		t.Logf("memory: working set %.2f MiB (%d bytes) at %s (filled %d MiB; accepted %d..%d MiB)",
			float64(ws)/(1<<20), ws, pm.Timestamp.Format(time.RFC3339), memFill, memFill, memFill+memSlack)
		if ws < lo || ws > hi {
			t.Errorf("working set of %s: %.2f MiB, want %d..%d MiB", name, float64(ws)/(1<<20), memFill, memFill+memSlack)
		}
	}
	checkTopAgrees(ctx, t, ns, name)
	checkHPAReads(ctx, t, ns, name, corev1.ResourceMemory)
}

// checkHPAReads puts the pod under a ReplicaSet of one replica, which adopts
// it (its labels match, it has no controller), with an HPA on res's
// utilization, and checks that the HPA reads what the metrics API serves:
// the average value, the containers' usage each in whole milli-units rounded
// up, and the utilization, that times 100 over the request rounded down
// (k8s.io/kubernetes pkg/controller/podautoscaler/metrics/client.go and
// utilization.go), when the PodMetrics read around the HPA are one reading.
func checkHPAReads(ctx context.Context, t *testing.T, ns, name string, res corev1.ResourceName) {
	t.Helper()
	client := suite.cluster.Client()
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	_, err = client.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: pod.Labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}, metav1.CreateOptions{})
	must(t, err)
	ref := autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name}
	must(t, createHPA(ctx, newHPA(ns, ref, 1, 1, autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{Name: res, Target: autoscalingv2.MetricTarget{
			Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(int32(50)),
		}},
	})))
	request := pod.Spec.Containers[0].Resources.Requests[res]
	mc, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	must(t, pollBounded(ctx, newHPABounds().read, "HPA "+name+" to read the metrics API's "+string(res), func(ctx context.Context) error {
		var hpa *autoscalingv2.HorizontalPodAutoscaler
		after, err := readingAround(ctx, mc, ns, name, "the HPA was read", func() (err error) {
			hpa, err = getHPA(ctx, ns, name)
			return err
		})
		if err != nil {
			return err
		}
		var milli int64
		for _, c := range after.Containers {
			q := c.Usage[res]
			milli += q.MilliValue()
		}
		wantUtil := int32(milli * 100 / request.MilliValue())
		if len(hpa.Status.CurrentMetrics) != 1 || hpa.Status.CurrentMetrics[0].Resource == nil {
			return fmt.Errorf("HPA has no %s reading; %s", res, conditions(hpa))
		}
		cur := hpa.Status.CurrentMetrics[0].Resource.Current
		if cur.AverageUtilization == nil || *cur.AverageUtilization != wantUtil || cur.AverageValue == nil || cur.AverageValue.MilliValue() != milli {
			return fmt.Errorf("HPA reads %v%% (%v), the metrics API %d%% (%dm of %s)", ptr.Deref(cur.AverageUtilization, -1), cur.AverageValue, wantUtil, milli, request.String())
		}
		t.Logf("HPA on ReplicaSet %s: %s %d%% (average %s of request %s), as the metrics API's reading at %s", name, res, wantUtil, cur.AverageValue, request.String(), after.Timestamp.Format(time.RFC3339))
		return nil
	}))
}

// readingAround reads the pod's PodMetrics before and after read and returns
// it when both have one timestamp: the server did not scrape in between, so
// that reading is the one read saw.
func readingAround(ctx context.Context, mc metricsclient.Interface, ns, name, what string, read func() error) (*metricsv1beta1.PodMetrics, error) {
	before, err := mc.MetricsV1beta1().PodMetricses(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if err := read(); err != nil {
		return nil, err
	}
	after, err := mc.MetricsV1beta1().PodMetricses(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if !before.Timestamp.Equal(&after.Timestamp) {
		return nil, errors.New("the server scraped while " + what)
	}
	return after, nil
}

// checkTopAgrees checks that kubectl top pod prints the PodMetrics the
// metrics API serves, rounded as kubectl rounds (readingAround).
func checkTopAgrees(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	mc, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	must(t, pollBounded(ctx, time.Minute, "kubectl top pod "+name+" to print the metrics API's reading", func(ctx context.Context) error {
		var out string
		after, err := readingAround(ctx, mc, ns, name, "kubectl top ran", func() (err error) {
			out, _, err = suite.cluster.Kubectl(ctx, "top", "pod", "-n", ns, name)
			return err
		})
		if err != nil {
			return err
		}
		r, ok := parseTable(out).byKey(1)[name]
		if !ok || len(r) < 3 {
			return fmt.Errorf("no row for %s in\n%s", name, out)
		}
		u := after.Containers[0].Usage
		cpu, mem := milli(uint64(u.Cpu().ScaledValue(-9))), mebi(uint64(u.Memory().Value()))
		t.Logf("kubectl top pod %s: %s %s", name, r[1], r[2])
		if r[1] != cpu || r[2] != mem {
			t.Errorf("kubectl top pod %s: %s %s, the metrics API says %s %s", name, r[1], r[2], cpu, mem)
		}
		return nil
	}))
}

// checkExec runs a command in a container through kubectl exec, which
// kube-apiserver forwards to the kubelet with its kubelet client
// certificate, and the kubelet to containerd's streaming server.
func checkExec(ctx context.Context, t *testing.T, ns, name string) {
	out, _, err := suite.cluster.Kubectl(ctx, "exec", "-n", ns, name, "--", "sh", "-c", "echo $((6 * 7)) $(seq 3 | wc -l)")
	must(t, err)
	t.Logf("kubectl exec %s: %q", name, out)
	if got := strings.TrimSpace(out); got != "42 3" {
		t.Errorf("kubectl exec %s printed %q, want \"42 3\"", name, got)
	}
}

// checkKubeletAuthorization reads the kubelet's Summary as the server's
// ServiceAccount (allowed nodes/stats by manifests/base), as a
// ServiceAccount without any role (403), and with no credentials (401,
// anonymous access being off).
func checkKubeletAuthorization(ctx context.Context, t *testing.T, n *cluster.RealNode, ns, serverNS, serverSA string) {
	serverToken, err := saToken(ctx, serverNS, serverSA)
	must(t, err)
	stripped := newServiceAccount(ctx, t, ns, "stripped")

	const path = "/stats/summary?only_cpu_and_memory=true"
	for _, c := range []struct {
		who, token string
		want       int
	}{
		{"system:serviceaccount:" + serverNS + ":" + serverSA, serverToken, http.StatusOK},
		{"system:serviceaccount:" + ns + ":stripped", stripped, http.StatusForbidden},
		{"no credentials", "", http.StatusUnauthorized},
	} {
		code, body, err := kubeletGet(ctx, n, path, c.token)
		must(t, err)
		if code == http.StatusOK && c.want == http.StatusOK {
			var summary statsv1alpha1.Summary
			must(t, json.Unmarshal(body, &summary))
			t.Logf("GET %s as %s: %d, node %s, %d pods", path, c.who, code, summary.Node.NodeName, len(summary.Pods))
			if summary.Node.NodeName != n.Name() {
				t.Errorf("summary of node %q, want %q", summary.Node.NodeName, n.Name())
			}
			checkSummaryTimes(t, body)
			continue
		}
		t.Logf("GET %s as %s: %d %s", path, c.who, code, strings.TrimSpace(string(body)))
		if code != c.want {
			t.Errorf("GET %s as %s: %d, want %d", path, c.who, code, c.want)
		}
	}
}

// checkSummaryTimes checks that the Summary carries the containers' CPU
// sample times to the second, as the CPU case's bound assumes
// (summaryTimeResolution): metav1.Time's JSON is RFC 3339 without a
// fraction. A kubelet that sends more would let the bound be tightened.
func checkSummaryTimes(t *testing.T, body []byte) {
	var raw struct {
		Pods []struct {
			Containers []struct {
				Name string `json:"name"`
				CPU  struct {
					Time string `json:"time"`
				} `json:"cpu"`
			} `json:"containers"`
		} `json:"pods"`
	}
	must(t, json.Unmarshal(body, &raw))
	for _, p := range raw.Pods {
		for _, c := range p.Containers {
			t.Logf("container %s: cpu.time %q", c.Name, c.CPU.Time)
			if _, err := time.Parse(time.RFC3339, c.CPU.Time); err != nil || strings.Contains(c.CPU.Time, ".") {
				t.Errorf("container %s: cpu.time %q is not RFC 3339 to the second (%v)", c.Name, c.CPU.Time, err)
			}
		}
	}
}

// logRealNodeMetrics logs what the server serves for the real node; the
// node's usage is the whole machine's, so it has no expected value here.
func logRealNodeMetrics(ctx context.Context, t *testing.T, n *cluster.RealNode) {
	mc, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	must(t, pollBounded(ctx, time.Minute, "NodeMetrics of "+n.Name(), func(ctx context.Context) error {
		nm, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, n.Name(), metav1.GetOptions{})
		if err == nil {
			t.Logf("node %s: cpu %dm, memory %d MiB, window %v", n.Name(), nm.Usage.Cpu().MilliValue(), nm.Usage.Memory().Value()>>20, nm.Window.Duration)
		}
		return err
	}))
}
