package podcache

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchPodWire is pod i of a bench-compare workload as kube-apiserver
// sends it and kwok leaves it running: two containers with requests, one
// app label shared by five pods, the status kwok writes. It is protobuf,
// so that decoding it allocates every string apart, as the informer's
// decoder does.
func benchPodWire(b *testing.B, i int) []byte {
	b.Helper()
	started := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	containers := []corev1.Container{
		{Name: "app", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{Requests: req}},
		{Name: "sidecar", Image: "registry.example/sidecar:1", Resources: corev1.ResourceRequirements{Requests: req}},
	}
	var conditions []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		conditions = append(conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started})
	}
	var statuses []corev1.ContainerStatus
	for _, c := range containers {
		statuses = append(statuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("app-%05d-%d", i/5, i%5),
			Namespace:         fmt.Sprintf("bench-%03d", i%50),
			UID:               types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			ResourceVersion:   fmt.Sprint(100000 + i),
			CreationTimestamp: started,
			Labels:            map[string]string{"app": fmt.Sprintf("app-%05d", i/5)},
		},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%04d", i/30), Containers: containers},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, Conditions: conditions, HostIP: "127.0.0.1",
			PodIP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), StartTime: &started,
			ContainerStatuses: statuses,
		},
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
