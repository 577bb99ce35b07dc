//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// startRealNode starts a real node in the suite's cluster and stops it, with
// everything it ran and mounted, when the test ends.
func startRealNode(ctx context.Context, t *testing.T) *cluster.RealNode {
	t.Helper()
	began := time.Now()
	n, err := suite.cluster.StartRealNode(ctx, cluster.RealNodeOptions{})
	must(t, err)
	t.Cleanup(func() {
		stopped := time.Now()
		if err := n.Stop(); err != nil {
			t.Errorf("stop real node: %v", err)
		}
		t.Logf("real node stopped in %v", since(stopped))
	})
	t.Logf("real node %s Ready in %v (kubelet %s)", n.Name(), since(began), n.KubeletURL())
	return n
}

// kubeletCABundle writes the fleet's CA and the cluster CA, which signs the
// real kubelet's serving certificate, into one file, so that one server
// verifies both kinds of kubelet.
func kubeletCABundle(t *testing.T) string {
	t.Helper()
	path := filepath.Join(suite.cluster.WorkDir(), "realnode-kubelet-ca.crt")
	bundle := append(readFile(t, suite.fleet.CAFile), suite.cluster.CACertPEM()...)
	must(t, os.WriteFile(path, bundle, 0o644))
	return path
}

// realPod is a pod bound to node with one container, name, of the workload
// image (never pulled) running sh -c script, requests equal to limits.
func realPod(ns, name, node, script string, cpu, memory string) *corev1.Pod {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name:            name,
				Image:           cluster.NodeWorkloadImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
				Resources:       corev1.ResourceRequirements{Requests: res, Limits: res},
			}},
		},
	}
}

// waitRunning waits until every pod runs with its containers started.
func waitRunning(ctx context.Context, t *testing.T, n *cluster.RealNode, pods ...*corev1.Pod) {
	t.Helper()
	client := suite.cluster.Client()
	for _, p := range pods {
		must(t, boundedPoll(ctx, 2*time.Minute, "pod "+p.Name+" to run on "+n.Name(), append(watched(), n.Processes()...), func(ctx context.Context) error {
			got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s is %s: %v", p.Name, got.Status.Phase, got.Status.ContainerStatuses)
			}
			for _, cs := range got.Status.ContainerStatuses {
				if cs.State.Running == nil {
					return fmt.Errorf("container %s of %s is not running: %+v", cs.Name, p.Name, cs.State)
				}
			}
			return nil
		}))
	}
}

// kubeletGet GETs path from the real kubelet with token (none if empty),
// verifying its serving certificate against the cluster CA.
func kubeletGet(ctx context.Context, n *cluster.RealNode, path, token string) (int, []byte, error) {
	cfg := &rest.Config{BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: suite.cluster.CACertPEM()}}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, nil, err
	}
	defer client.CloseIdleConnections()
	code, body, err := env.Get(ctx, client, n.KubeletURL()+path)
	return code, []byte(body), err
}

// taskCgroup returns the directory of a container's cgroup in controller's
// hierarchy (cgroup v1), found from its task's PID, and how many tasks
// containerd runs on the node.
func taskCgroup(ctx context.Context, n *cluster.RealNode, containerID, controller string) (dir string, tasks int, err error) {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok {
		return "", 0, fmt.Errorf("container ID %q", containerID)
	}
	out, err := n.Ctr(ctx, "tasks", "list")
	if err != nil {
		return "", 0, err
	}
	var pid string
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 2 {
			if tasks++; f[0] == id {
				pid = f[1]
			}
		}
	}
	if pid == "" {
		return "", 0, fmt.Errorf("no task of container %s in\n%s", id, out)
	}
	cgroups, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return "", 0, err
	}
	for _, line := range strings.Split(string(cgroups), "\n") {
		// hierarchy-ID:controller-list:path
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			return filepath.Join("/sys/fs/cgroup", f[1], f[2]), tasks, nil
		}
	}
	return "", 0, fmt.Errorf("no %s cgroup of %s in\n%s", controller, pid, cgroups)
}

// readCounter reads a cgroup file holding one number: cpuacct.usage (the
// container's CPU time in core-nanoseconds, the counter containerd
// reports), memory.usage_in_bytes.
func readCounter(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

// chargeBatches is one memory cgroup charge batch (MEMCG_CHARGE_BATCH, 64
// pages, include/linux/memcontrol.h) per CPU: what the kernel may charge to
// usage_in_bytes ahead of use, or past the limit.
func chargeBatches() int64 { return 64 * int64(os.Getpagesize()) * int64(runtime.NumCPU()) }

// throttling is one reading of a cgroup's CFS bandwidth statistics
// (cpu.stat): how many enforcement periods have elapsed and in how many
// the cgroup ran out of quota.
type throttling struct {
	at                   time.Time
	periods, nrThrottled int64
}

// sampleThrottling reads dir/cpu.stat every 20 ms until stop is called,
// which takes one more reading, closing every window that had ended by
// then, and returns the readings.
func sampleThrottling(dir string) (stop func() []throttling) {
	var out []throttling
	sample := func(context.Context) {
		data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return
		}
		s := throttling{at: time.Now()}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "nr_periods":
				s.periods = n
			case "nr_throttled":
				s.nrThrottled = n
			}
		}
		out = append(out, s)
	}
	halt := background(context.Background(), 20*time.Millisecond, sample)
	return func() []throttling {
		halt()
		sample(context.Background())
		return out
	}
}

// throttledWithin returns how many periods the readings show throttled
// between from and to, counting only readings inside the interval, and
// how many periods elapsed there.
func throttledWithin(samples []throttling, from, to time.Time) (throttled, periods int64, ok bool) {
	first := slices.IndexFunc(samples, func(s throttling) bool { return !s.at.Before(from) })
	last := -1
	for i, s := range samples {
		if !s.at.After(to) {
			last = i
		}
	}
	if first < 0 || last <= first {
		return 0, 0, false
	}
	return samples[last].nrThrottled - samples[first].nrThrottled, samples[last].periods - samples[first].periods, true
}
