package fakekubelet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

func podObject(name, node string, phase corev1.PodPhase, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}},
			{Name: "log"},
		}},
		Status: corev1.PodStatus{Phase: phase, StartTime: &metav1.Time{Time: t0.Add(-time.Minute)}},
	}
}

// placement lists "node/namespace/name/uid" for every pod of the fleet.
func placement(f *Fleet) []string {
	var out []string
	for _, n := range f.Nodes() {
		for _, p := range n.State(true).Pods {
			out = append(out, n.Name()+"/"+p.PodRef.Namespace+"/"+p.PodRef.Name+"/"+p.PodRef.UID)
		}
	}
	return out
}

func TestPodFromObject(t *testing.T) {
	want := Pod{
		Namespace: "ns", Name: "p", UID: "u1", Labels: map[string]string{"app": "p"},
		Containers: []Container{{Name: "app", MemoryLimit: resource.MustParse("64Mi")}, {Name: "log"}},
		StartTime:  t0.Add(-time.Minute),
	}
	checkDiff(t, "PodFromObject", want, PodFromObject(podObject("p", "n1", corev1.PodRunning, "u1")))
}

func TestPodInformer(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	addNode(t, f, "n1")
	addNode(t, f, "n2")
	client := fake.NewClientset(
		podObject("running", "n1", corev1.PodRunning, "u1"),
		podObject("pending", "n2", corev1.PodPending, "u2"),
		podObject("elsewhere", "n9", corev1.PodRunning, "u3"),
		podObject("unbound", "", corev1.PodPending, "u4"),
	)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	must(t, f.StartPodInformer(ctx, client))
	if diff := cmp.Diff([]string{"n1/ns/running/u1"}, placement(f)); diff != "" {
		t.Fatalf("after sync (-want +got):\n%s", diff)
	}

	pods := client.CoreV1().Pods("ns")
	setStatus := func(p *corev1.Pod) error { _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); return err }
	steps := []struct {
		name   string
		change func() error
		want   []string
	}{
		{"pending pod starts running", func() error { return setStatus(podObject("pending", "n2", corev1.PodRunning, "u2")) },
			[]string{"n1/ns/running/u1", "n2/ns/pending/u2"}},
		{"pod finishes", func() error { return setStatus(podObject("running", "n1", corev1.PodSucceeded, "u1")) },
			[]string{"n2/ns/pending/u2"}},
		{"pod is replaced under the same name", func() error {
			if err := pods.Delete(ctx, "pending", metav1.DeleteOptions{}); err != nil {
				return err
			}
			_, err := pods.Create(ctx, podObject("pending", "n1", corev1.PodRunning, "u5"), metav1.CreateOptions{})
			return err
		}, []string{"n1/ns/pending/u5"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			must(t, s.change())
			var got []string
			err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, requestTimeout, true, func(context.Context) (bool, error) {
				got = placement(f)
				return cmp.Equal(s.want, got), nil
			})
			if err != nil {
				t.Errorf("placement never became %v; last %v", s.want, got)
			}
		})
	}
}

func TestRegisterNodes(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n1, n2 := addNode(t, f, "n1"), addNode(t, f, "n2")
	stale := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	stale.Status.DaemonEndpoints.KubeletEndpoint.Port = 1
	client := fake.NewClientset(stale)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	reg := NodeRegistration{Labels: map[string]string{"pool": "fake"}, Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}
	must(t, f.RegisterNodes(ctx, client, reg))
	type view struct {
		Annotation, Pool, IP, CPU, Memory string
		Port                              int32
	}
	got := map[string]view{}
	for _, name := range []string{"n1", "n2"} {
		obj, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		capacity := func(r corev1.ResourceName) string {
			if q, ok := obj.Status.Capacity[r]; ok {
				return q.String()
			}
			return ""
		}
		v := view{Annotation: obj.Annotations[cluster.KwokNodeAnnotation], Pool: obj.Labels["pool"], CPU: capacity(corev1.ResourceCPU),
			Memory: capacity(corev1.ResourceMemory), Port: obj.Status.DaemonEndpoints.KubeletEndpoint.Port}
		for _, a := range obj.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				v.IP = a.Address
			}
		}
		got[name] = v
	}
	want := map[string]view{
		"n1": {Annotation: "fake", Pool: "fake", IP: "127.0.0.1", CPU: "8", Memory: "256Gi", Port: int32(n1.Port())},
		// An existing node keeps its metadata and gets the endpoint.
		"n2": {IP: "127.0.0.1", Port: int32(n2.Port())},
	}
	checkDiff(t, "registered nodes", want, got)
}

func TestTokenReviewAuthenticator(t *testing.T) {
	client := fake.NewClientset()
	var calls atomic.Int32
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status.Authenticated = tr.Spec.Token == "good"
		return true, tr, nil
	})
	a := NewTokenReviewAuthenticator(client, time.Hour)
	tests := []struct {
		name, token string
		want        bool
		wantCalls   int32
	}{
		{"accepted", "good", true, 1},
		{"accepted from cache", "good", true, 1},
		{"rejected", "bad", false, 2},
		{"rejected from cache", "bad", false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, err := a.AuthenticateToken(context.Background(), tt.token)
			must(t, err)
			if got != tt.want || calls.Load() != tt.wantCalls {
				t.Errorf("got %v after %d reviews; want %v after %d", got, calls.Load(), tt.want, tt.wantCalls)
			}
		})
	}
}
