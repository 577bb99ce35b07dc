package podcache

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

func TestNewPod(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	always, isController := corev1.ContainerRestartPolicyAlways, true
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	both := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	started, ready := metav1.NewTime(now.Add(-time.Hour)), metav1.NewTime(now.Add(-50*time.Minute))
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7", Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{
				AnnotationPrefix + "policy": "group", IgnoreAnnotation: "setup",
				"kubectl.kubernetes.io/last-applied-configuration": "{...}",
				ScrapeAnnotationPrefix + "port":                    "8000", "prometheus.io/scrape": "true", "prometheus.io/other": "x",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{
				{Kind: "ConfigMap", Name: "not-the-controller", UID: "c1"},
				{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "lws", UID: "s1", Controller: &isController},
			},
		},
		Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true, ServiceAccountName: "exporter",
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: req}},
				{Name: "proxy", Image: "envoy", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: req}},
			},
			Containers: []corev1.Container{{Name: "app", Image: "nginx", Resources: corev1.ResourceRequirements{Requests: both, Limits: both}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", StartTime: &started,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready, Reason: "r", Message: "m"},
			},
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "setup", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
				{Name: "proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ready}}},
			},
		},
	}
	obj, err := TrimPod(in)
	must(t, err)
	p := obj.(*Pod)
	type view struct {
		Meta                        metav1.ObjectMeta
		Node                        string
		Phase                       corev1.PodPhase
		Containers, RunningSidecars []string
		Request                     group.Requests
		AppMemory, ProxyCPU         int64
		Readiness                   corev1.PodStatus
		IP                          string
		Ready, HostNetwork          bool
		ServiceAccount              string
		Controller                  *Controller
	}
	appMem, _ := p.ContainerRequest("app", group.Memory)
	proxyCPU, _ := p.ContainerRequest("proxy", group.CPU)
	got := view{p.ObjectMeta, p.NodeName(), p.Phase(), p.Containers(), p.RunningSidecars(), p.Request(), appMem, proxyCPU, p.ReadinessView().Status, p.IP(), p.Ready(), p.HostNetwork(), p.ServiceAccount(), p.ControllerRef()}
	want := view{
		Meta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7", Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{AnnotationPrefix + "policy": "group", IgnoreAnnotation: "setup",
				ScrapeAnnotationPrefix + "port": "8000", "prometheus.io/scrape": "true"}},
		Node: "n1", Phase: corev1.PodRunning, Containers: []string{"app"}, RunningSidecars: []string{"proxy"},
		// The HPA's sum: app and the sidecar; memory is missing on the
		// sidecar, so missing for the pod.
		Request:   group.Requests{Milli: [2]int64{350, 0}, Has: [2]bool{true, false}},
		AppMemory: (1 << 30) * 1000, ProxyCPU: 100,
		Readiness: corev1.PodStatus{StartTime: &started, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready}}},
		IP:        "10.0.0.1", Ready: true, HostNetwork: true, ServiceAccount: "exporter",
		Controller: &Controller{Kind: "StatefulSet", Name: "lws", UID: "s1"},
	}
	checkDiff(t, "NewPod", want, got)
	for name, runs := range map[string]bool{"app": true, "proxy": true, "setup": false, "other": false} {
		if got := p.RunsContainer(name); got != runs {
			t.Errorf("RunsContainer(%q) = %v, want %v", name, got, runs)
		}
	}
	if !NewPod(&corev1.Pod{}).RunsContainer("anything") {
		t.Error("a pod without listed containers should run any")
	}
	if other, err := TrimPod("not a pod"); err != nil || other != "not a pod" {
		t.Errorf("TrimPod of a non-pod = %v, %v; want it unchanged", other, err)
	}
}

// TestNewNode: a cached node keeps what the sources read, of its
// annotations only the resource metrics path.
func TestNewNode(t *testing.T) {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}}
	in := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", UID: "u", ResourceVersion: "3", Labels: map[string]string{"type": "kwok"},
			Annotations:   map[string]string{ResourceMetricsPathAnnotation: "/metrics/nodes/kwok-0/metrics/resource", "kwok.x-k8s.io/node": "fake"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kwok"}}},
		Status: corev1.NodeStatus{Addresses: addrs, DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10247}},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}},
	}
	obj, err := TrimNode(in)
	must(t, err)
	n := obj.(*Node)
	type view struct {
		Meta      metav1.ObjectMeta
		Addresses []corev1.NodeAddress
		Port      int
	}
	checkDiff(t, "NewNode", view{
		Meta: metav1.ObjectMeta{Name: "kwok-0", UID: "u", ResourceVersion: "3", Labels: map[string]string{"type": "kwok"},
			Annotations: map[string]string{ResourceMetricsPathAnnotation: "/metrics/nodes/kwok-0/metrics/resource"}},
		Addresses: addrs, Port: 10247,
	}, view{n.ObjectMeta, n.Addresses(), n.KubeletPort()})
	if a := NewNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{"other": "x"}}}).Annotations; a != nil {
		t.Errorf("a node without the path keeps annotations %v, want none", a)
	}
}

func TestStartedPods(t *testing.T) {
	pod := func(node string, phase corev1.PodPhase) *Pod {
		return NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}})
	}
	var got []string
	h := startedPods(func(node string) { got = append(got, node) }).(cache.ResourceEventHandlerDetailedFuncs)

	h.AddFunc(pod("n1", corev1.PodRunning), true)  // initial list: the first tick covers it
	h.AddFunc(pod("n2", corev1.PodRunning), false) // created running
	h.AddFunc(pod("n3", corev1.PodPending), false)
	h.AddFunc(pod("", corev1.PodRunning), false)
	h.UpdateFunc(pod("n4", corev1.PodPending), pod("n4", corev1.PodRunning)) // starts
	h.UpdateFunc(pod("n5", corev1.PodRunning), pod("n5", corev1.PodRunning)) // already running
	h.UpdateFunc(pod("n6", corev1.PodRunning), pod("n6", corev1.PodSucceeded))
	h.UpdateFunc(cache.DeletedFinalStateUnknown{}, pod("n7", corev1.PodRunning))

	if want := []string{"n2", "n4", "n7"}; !slices.Equal(got, want) {
		t.Errorf("soon called for %v, want %v", got, want)
	}
}

// benchPodWire is pod i of a bench-compare workload as kube-apiserver
// sends it and kwok leaves it running: two containers with requests, one
// app label shared by five pods, the status kwok writes. It is protobuf,
// so that decoding it allocates every string apart, as the informer's
// decoder does.
func benchPodWire(b *testing.B, i int) []byte {
	b.Helper()
	started := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	containers := []corev1.Container{{Name: "app", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{Requests: req}},
		{Name: "sidecar", Image: "registry.example/sidecar:1", Resources: corev1.ResourceRequirements{Requests: req}}}
	var conditions []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		conditions = append(conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started})
	}
	var statuses []corev1.ContainerStatus
	for _, c := range containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d-%d", i/5, i%5), Namespace: fmt.Sprintf("bench-%03d", i%50),
			UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: started,
			Labels: map[string]string{"app": fmt.Sprintf("app-%05d", i/5)}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%04d", i/30), Containers: containers},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conditions, HostIP: "127.0.0.1",
			PodIP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), StartTime: &started, ContainerStatuses: statuses},
	}
	wire, err := p.Marshal()
	must(b, err)
	return wire
}

// BenchmarkPodCacheMemory reports what the pod cache keeps per pod of a
// 15,000-pod workload (bench-compare's 500 nodes × 30 pods): the live heap
// that decoding each pod, trimming it and indexing it leaves once the
// decoded objects are garbage. The informer's own store, which holds the
// same *Pod under its key, is left out.
func BenchmarkPodCacheMemory(b *testing.B) {
	const pods = 15000
	wire := make([][]byte, pods)
	for i := range wire {
		wire[i] = benchPodWire(b, i)
	}
	b.ResetTimer()
	for range b.N {
		before := liveHeap()
		x := NewPodIndex()
		for _, w := range wire {
			var p corev1.Pod
			must(b, p.Unmarshal(w))
			obj, err := TrimPod(&p)
			must(b, err)
			x.Set(obj.(*Pod))
		}
		after := liveHeap()
		runtime.KeepAlive(x)
		b.ReportMetric(float64(after-before)/pods, "live-B/pod")
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
