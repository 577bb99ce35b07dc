//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// The LeaderWorkerSet project's HPA guide (testdata/lws-hpa-guide/README.md
// says where each file comes from): two groups of a leader and two workers,
// each pod requesting 100m and limited to 500m, and lws-hpa holding the
// groups between 2 and 8 at 50% CPU utilization.
const (
	guideDir       = "testdata/lws-hpa-guide"
	guideNamespace = "e2e-lws-guide"
	guideLWS       = "leaderworkerset-sample"
	guideHPA       = "lws-hpa"
	guideGroups    = 2
	guideGroupSize = 3
	guideMaxGroups = 8
	// guideLoad is the guide's command for loading a pod, as kubectl exec
	// runs it: four yes processes, which the pod's 500m limit holds to
	// half a core together.
	guideLoad = "for i in $(seq 1 4); do yes > /dev/null & done"
)

// A loaded worker makes its group's utilization its usage over the group's
// Σrequest (3 × 100m). The HPA acts on a ratio to its 50% target outside its
// tolerance, 0.1 (kube-controller-manager's
// --horizontal-pod-autoscaler-tolerance default), so under the group policy a
// group scales once its worker uses more than 1.1 × 50% × 300m = 165m. The
// guide's load gives it up to its 500m limit; the test waits until the server
// reads more than guideWorkerLoad before it asks either policy anything, so
// the pod policy's holding still is not the load's absence.
const guideWorkerLoad = 165_000_000 // nanocores

// guideScaleUpPeriod is the period of the HPA's default scale-up policies.
const guideScaleUpPeriod = 15 * time.Second

// checkLWSGuide runs the guide as written on the real node: its manifests
// applied unchanged in a namespace whose pods the PodNodeSelector admission
// plugin keeps on the real node, and its kubectl exec load. In order:
//
//   - the same load on one worker of each group: under the server's default
//     pod policy the HPA, which reads the leaders only, holds at 2 groups;
//     with the leaders annotated for the group policy it scales up;
//   - the loaded workers deleted (LeaderWorkerSet restarts their groups,
//     unloaded and without the annotation): back to 2 groups after the
//     downscale stabilization window;
//   - the guide's own test: the load on both leaders scales the groups to 8
//     ("LeaderWorkerSet replicas gradually increase to 8"), and deleting
//     the leaders, as the guide stops the load, brings them back to 2;
//   - the guide's memory and CPU-and-memory HPAs apply and read values.
func checkLWSGuide(ctx context.Context, t *testing.T, rn *realNodeEnv) {
	e := newLWSEnv(ctx, t)
	e.watch = append(e.watch, rn.node.Processes()...)
	ns := guideNamespace
	newNamespace(ctx, t, ns)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.PodNodeSelectorAnnotation, rn.node.OnlyHere())
	_, err := suite.cluster.Client().CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)

	began := time.Now()
	guideKubectl(ctx, t, "apply", "-n", ns, "-f", repoPath(t, "test", "e2e", guideDir, "lws.yaml"))
	pods, err := e.waitPods(ctx, ns, guideLWS, guideGroups*guideGroupSize, e.bounds.running)
	must(t, err)
	for _, p := range pods {
		if p.Spec.NodeName != rn.node.Name() {
			t.Fatalf("pod %s is on node %q, not the real node", p.Name, p.Spec.NodeName)
		}
	}
	t.Logf("guide step 1: %d pods Running on %s %v after kubectl apply", len(pods), rn.node.Name(), since(began))
	guideKubectl(ctx, t, "apply", "-n", ns, "-f", repoPath(t, "test", "e2e", guideDir, "hpa.yaml"))
	e.waitReading(ctx, t, ns, guideHPA, -1, e.bounds.read)
	t.Logf("guide step 3: %s", hpaState(ctx, ns, guideHPA))

	workers := []string{guideLWS + "-0-1", guideLWS + "-1-1"}
	leaders := []string{guideLWS + "-0", guideLWS + "-1"}
	t.Run("worker-load", func(t *testing.T) {
		guideLoadPods(ctx, t, e, ns, workers...)
		began := time.Now()
		e.holdGroups(ctx, t, ns, guideLWS, guideHPA, guideGroups, e.bounds.hold)
		t.Logf("pod policy: %d groups held for %v with the workers loaded; %s", guideGroups, since(began), hpaState(ctx, ns, guideHPA))

		began = time.Now()
		for _, l := range leaders {
			guideKubectl(ctx, t, "annotate", "-n", ns, "pod", l, group.AnnotationPolicy+"="+string(group.PolicyGroup))
		}
		got := guideWaitAbove(ctx, t, e, ns, guideGroups, e.bounds.up)
		t.Logf("group policy: %d groups wanted %v after the leaders were annotated; %s", got, since(began), hpaState(ctx, ns, guideHPA))

		began = time.Now()
		guideKubectl(ctx, t, append([]string{"delete", "pod", "-n", ns, "--wait=false"}, workers...)...)
		e.waitScale(ctx, t, ns, guideLWS, guideHPA, guideGroups, e.bounds.running+e.bounds.down)
		t.Logf("loaded workers deleted: back to %d groups %v later", guideGroups, since(began))
	})

	t.Run("leader-load", func(t *testing.T) {
		// Deleting a worker restarted its whole group (the LeaderWorkerSet's
		// default restart policy): the load goes to the new leaders.
		began := time.Now()
		guideWaitRestarted(ctx, t, e, ns, pods)
		t.Logf("both groups restarted, %d new pods Running %v later", guideGroups*guideGroupSize, since(began))
		began = guideLoadPods(ctx, t, e, ns, leaders...)
		// The HPA's default scale-up policies allow, each 15 s, the larger
		// of doubling and four more (k8s.io/kubernetes
		// pkg/apis/autoscaling/v2/defaults.go): 2, then 6, then 8.
		e.waitScale(ctx, t, ns, guideLWS, guideHPA, guideMaxGroups, e.bounds.up+2*guideScaleUpPeriod-time.Since(began))
		t.Logf("guide: %d groups wanted %v after the leaders were loaded; %s", guideMaxGroups, since(began), hpaState(ctx, ns, guideHPA))
		out, _, err := suite.cluster.Kubectl(ctx, "top", "pods", "-n", ns, "-l", group.LabelName+"="+guideLWS)
		must(t, err)
		t.Logf("kubectl top pods -l %s=%s:\n%s", group.LabelName, guideLWS, out)

		began = time.Now()
		guideKubectl(ctx, t, append([]string{"delete", "pod", "-n", ns, "--wait=false"}, leaders...)...)
		e.waitScale(ctx, t, ns, guideLWS, guideHPA, guideGroups, e.bounds.running+e.bounds.down)
		t.Logf("guide: loaded leaders deleted, back to %d groups %v later", guideGroups, since(began))
	})

	t.Run("memory-and-multi-metric", func(t *testing.T) {
		guideKubectl(ctx, t, "delete", "hpa", "-n", ns, guideHPA)
		for _, c := range []struct{ file, name string }{
			{"memory-hpa.yaml", "lws-memory-hpa"},
			{"multi-metric-hpa.yaml", "lws-multi-metric-hpa"},
		} {
			guideKubectl(ctx, t, "apply", "-n", ns, "-f", repoPath(t, "test", "e2e", guideDir, c.file))
			guideWaitResources(ctx, t, e, ns, c.name)
			t.Log(hpaState(ctx, ns, c.name))
			// Two HPAs on one target make both refuse to scale
			// (AmbiguousSelector): one at a time, as the guide offers them.
			guideKubectl(ctx, t, "delete", "hpa", "-n", ns, c.name)
		}
	})
}

func guideKubectl(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	out, stderr, err := suite.cluster.Kubectl(ctx, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
}

// guideLoadPods runs the guide's load in each pod through kubectl exec, as
// the guide does, and returns when it started the load, once the server reads
// each pod above guideWorkerLoad over a window that began after that.
//
// The guide's command leaves yes's error stream to the exec session:
// containerd (1.6 here) ends a session only when every holder of its streams
// has closed them, so kubectl exec does not return while the load runs, and a
// user stops it with Ctrl-C. The load outlives kubectl: the shell that
// started it has exited and nothing signals its children. The test likewise
// ends each kubectl once the load shows, and the load goes on.
func guideLoadPods(ctx context.Context, t *testing.T, e *lwsEnv, ns string, pods ...string) time.Time {
	t.Helper()
	loaded := time.Now()
	execCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	for _, pod := range pods {
		running.Go(func() {
			_, stderr, err := suite.cluster.Kubectl(execCtx, "exec", "-n", ns, pod, "--", "/bin/sh", "-c", guideLoad)
			if execCtx.Err() == nil {
				t.Errorf("kubectl exec %s returned while its load runs: %v %s", pod, err, stderr)
			}
		})
	}
	defer func() {
		stop()
		running.Wait()
		t.Logf("kubectl exec -n %s <pod> -- /bin/sh -c %q in %s, ended after %v", ns, guideLoad, strings.Join(pods, ", "), since(loaded))
	}()
	for _, name := range pods {
		must(t, e.poll(ctx, e.bounds.read, "pod "+name+" to read above 165m", func(ctx context.Context) error {
			pm, err := e.metrics.MetricsV1beta1().PodMetricses(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			u := podUsage(*pm)
			if !u.start.After(loaded.Truncate(time.Second)) {
				return fmt.Errorf("window begins %v, before the load", u.start)
			}
			if u.cpuNano <= guideWorkerLoad {
				return fmt.Errorf("reads %dm", u.cpuNano/1e6)
			}
			t.Logf("pod %s reads %.1fm over %v", name, float64(u.cpuNano)/1e6, pm.Window.Duration)
			return nil
		}))
	}
	return loaded
}

// guideWaitRestarted waits until the LWS has its guideGroups groups
// Running again, every pod new: none of before, none terminating.
func guideWaitRestarted(ctx context.Context, t *testing.T, e *lwsEnv, ns string, before []corev1.Pod) {
	t.Helper()
	old := map[types.UID]bool{}
	for _, p := range before {
		old[p.UID] = true
	}
	want := guideGroups * guideGroupSize
	must(t, e.poll(ctx, e.bounds.running+e.bounds.down, fmt.Sprintf("%d new pods Running", want), func(ctx context.Context) error {
		list, err := suite.cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lws.PodSelector(guideLWS)})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			switch {
			case p.DeletionTimestamp != nil:
				return fmt.Errorf("pod %s is terminating", p.Name)
			case old[p.UID]:
				return fmt.Errorf("pod %s is not restarted", p.Name)
			case p.Status.Phase != corev1.PodRunning || !ready:
				return fmt.Errorf("pod %s is %s, not Ready", p.Name, p.Status.Phase)
			}
		}
		if len(list.Items) != want {
			return fmt.Errorf("%d pods, want %d", len(list.Items), want)
		}
		return nil
	}))
}

// guideWaitAbove waits until the LWS wants more than groups groups and
// returns how many it wants.
func guideWaitAbove(ctx context.Context, t *testing.T, e *lwsEnv, ns string, groups int32, d time.Duration) int32 {
	t.Helper()
	var got int32
	must(t, e.poll(ctx, d, fmt.Sprintf("LeaderWorkerSet %s to want more than %d groups", guideLWS, groups), func(ctx context.Context) error {
		scale, err := lws.GetScale(ctx, e.dyn, ns, guideLWS)
		if err != nil {
			return err
		}
		if got = scale.Spec.Replicas; got <= groups {
			return fmt.Errorf("wants %d; %s", got, hpaState(ctx, ns, guideHPA))
		}
		return nil
	}))
	return got
}

// guideWaitResources waits until the HPA name reads a utilization for every
// resource metric it names.
func guideWaitResources(ctx context.Context, t *testing.T, e *lwsEnv, ns, name string) {
	t.Helper()
	must(t, e.poll(ctx, e.bounds.read, "HPA "+name+" to read every metric", func(ctx context.Context) error {
		hpa, err := getHPA(ctx, ns, name)
		if err != nil {
			return err
		}
		read := map[corev1.ResourceName]bool{}
		for _, m := range hpa.Status.CurrentMetrics {
			if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
				read[m.Resource.Name] = true
			}
		}
		for _, m := range hpa.Spec.Metrics {
			if m.Resource != nil && !read[m.Resource.Name] {
				return fmt.Errorf("no %s reading; %s", m.Resource.Name, conditions(hpa))
			}
		}
		return nil
	}))
}
