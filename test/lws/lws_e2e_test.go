//go:build e2e

package lws_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// binDir returns $GMS_BIN_DIR or <repo>/bin, failing the test when a binary
// it needs is missing.
func binDir(t *testing.T) string {
	t.Helper()
	dir, err := env.BinDir()
	if err == nil {
		err = env.CheckBinaries(dir,
			cluster.EtcdBinary, cluster.APIServerBinary, cluster.ControllerManagerBinary,
			cluster.SchedulerBinary, cluster.KubectlBinary, cluster.KwokBinary, lws.ControllerBinary)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

const (
	lwsName   = "sample"
	namespace = metav1.NamespaceDefault
	groupSize = 4
)

func TestLeaderWorkerSetController(t *testing.T) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	bins := binDir(t)

	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{BinDir: bins, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster started in %v", since(began))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:\n%s", c.LogTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})

	testCtx, testCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer testCancel()

	addNodes(testCtx, t, c, 4)

	began = time.Now()
	ctrl, err := lws.Install(testCtx, c, bins)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lws controller installed and ready in %v (module %s, webhooks at %s)",
		since(began), ctrl.ModuleDir(), ctrl.WebhookURL())
	t.Cleanup(func() {
		if err := ctrl.Stop(); err != nil {
			t.Errorf("stop lws controller: %v", err)
		}
	})

	client := c.Client()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	leaderAnnotations := map[string]string{group.AnnotationPolicy: string(group.PolicyGroup)}
	obj := lws.NewLeaderWorkerSet(namespace, lwsName, 2, groupSize, "250m", leaderAnnotations)
	began = time.Now()
	if _, err := dyn.Resource(lws.GroupVersionResource).Namespace(namespace).Create(testCtx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create LeaderWorkerSet: %v", err)
	}
	pods := waitForGroups(testCtx, t, client, 2)
	t.Logf("2 groups of %d pods Running %v after creating the LeaderWorkerSet", groupSize, since(began))
	checkGroups(t, pods, 2, leaderAnnotations)

	scale := waitForScale(testCtx, t, dyn, 2)
	wantSelector := lws.NameLabel + "=" + lwsName + "," + lws.WorkerIndexLabel + "=0"
	t.Logf("scale subresource: spec.replicas=%d status.replicas=%d status.selector=%q",
		scale.Spec.Replicas, scale.Status.Replicas, scale.Status.Selector)
	if scale.Status.Selector != wantSelector {
		t.Errorf("scale selector = %q, want %q", scale.Status.Selector, wantSelector)
	}

	began = time.Now()
	if _, _, err := c.Kubectl(testCtx, "scale", "-n", namespace, "lws/"+lwsName, "--replicas=3"); err != nil {
		t.Fatal(err)
	}
	pods = waitForGroups(testCtx, t, client, 3)
	t.Logf("scale to 3: the third group's %d pods Running %v after kubectl scale", groupSize, since(began))
	checkGroups(t, pods, 3, leaderAnnotations)
	scale = waitForScale(testCtx, t, dyn, 3)
	if scale.Spec.Replicas != 3 {
		t.Errorf("scale spec.replicas = %d after scaling, want 3", scale.Spec.Replicas)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// addNodes adds n kwok nodes; nothing listens on their kubelet ports.
func addNodes(ctx context.Context, t *testing.T, c *cluster.Cluster, n int) {
	t.Helper()
	ports, err := cluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n)
	for i, port := range ports {
		go func() { errs <- c.AddNode(ctx, "node-"+strconv.Itoa(i), nil, "", port) }()
	}
	for range ports {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// waitForGroups waits until the LeaderWorkerSet has exactly groups*groupSize
// pods, all Running, and returns them.
func waitForGroups(ctx context.Context, t *testing.T, client kubernetes.Interface, groups int) []corev1.Pod {
	t.Helper()
	want := groups * groupSize
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: lws.PodSelector(lwsName)})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		last = fmt.Sprintf("%d pods, %d Running", len(list.Items), running)
		pods = list.Items
		return len(list.Items) == want && running == want, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d Running pods: %v (last: %s)", want, err, last)
	}
	return pods
}

// checkGroups checks the LWS labels: group indexes 0..groups-1, worker
// indexes 0..groupSize-1 in each group, one group key per group and a
// different one for each group, and leaderAnnotations on leaders only.
func checkGroups(t *testing.T, pods []corev1.Pod, groups int, leaderAnnotations map[string]string) {
	t.Helper()
	type member struct{ name, key string }
	byGroup := map[string]map[string]member{}
	leaders, workers := 0, 0
	for _, p := range pods {
		l := p.Labels
		if l[lws.NameLabel] != lwsName {
			t.Errorf("pod %s: %s=%q", p.Name, lws.NameLabel, l[lws.NameLabel])
		}
		gi, wi, key := l[lws.GroupIndexLabel], l[lws.WorkerIndexLabel], l[lws.GroupKeyLabel]
		if gi == "" || wi == "" || key == "" {
			t.Errorf("pod %s lacks a group label: %v", p.Name, l)
			continue
		}
		if byGroup[gi] == nil {
			byGroup[gi] = map[string]member{}
		}
		byGroup[gi][wi] = member{p.Name, key}
		isLeader := wi == "0"
		if isLeader {
			leaders++
		} else {
			workers++
		}
		for k, v := range leaderAnnotations {
			if got, ok := p.Annotations[k]; isLeader && got != v {
				t.Errorf("leader %s: annotation %s=%q, want %q", p.Name, k, got, v)
			} else if !isLeader && ok {
				t.Errorf("worker %s has the leader annotation %s", p.Name, k)
			}
		}
	}
	if leaders != groups || workers != groups*(groupSize-1) {
		t.Errorf("%d leaders and %d workers, want %d and %d", leaders, workers, groups, groups*(groupSize-1))
	}
	keys := map[string]string{}
	for g := range groups {
		gi := strconv.Itoa(g)
		members := byGroup[gi]
		if len(members) != groupSize {
			t.Errorf("group %s has worker indexes %v, want 0..%d", gi, sortedKeys(members), groupSize-1)
			continue
		}
		key := members["0"].key
		var names []string
		for w := range groupSize {
			m, ok := members[strconv.Itoa(w)]
			if !ok {
				t.Errorf("group %s has no worker %d", gi, w)
				continue
			}
			if m.key != key {
				t.Errorf("group %s: pod %s has group key %s, leader has %s", gi, m.name, m.key, key)
			}
			names = append(names, m.name)
		}
		if other, dup := keys[key]; dup {
			t.Errorf("groups %s and %s share group key %s", other, gi, key)
		}
		keys[key] = gi
		t.Logf("group %s (key %s): %v", gi, key, names)
	}
	if len(byGroup) != groups {
		t.Errorf("group indexes %v, want 0..%d", sortedKeys(byGroup), groups-1)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// waitForScale waits until the scale subresource reports replicas groups
// both wanted and created and a selector, and returns it.
func waitForScale(ctx context.Context, t *testing.T, dyn dynamic.Interface, replicas int32) *autoscalingv1.Scale {
	t.Helper()
	var scale *autoscalingv1.Scale
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		scale, last = lws.GetScale(ctx, dyn, namespace, lwsName)
		if last != nil {
			return false, nil
		}
		return scale.Spec.Replicas == replicas && scale.Status.Replicas == replicas && scale.Status.Selector != "", nil
	})
	if err != nil {
		t.Fatalf("waiting for the scale subresource to report %d replicas: %v (last: %+v, %v)", replicas, err, scale, last)
	}
	return scale
}
