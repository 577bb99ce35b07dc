package podcache

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

func pod(ns, name string, lbls map[string]string) *Pod {
	return NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}})
}

// checkDiff fails t, naming what, when got differs from want.
func checkDiff(t *testing.T, what string, want, got any, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func keys(pods []*Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestPodIndexList(t *testing.T) {
	x := NewPodIndex()
	// Added out of order, and one replaced with other labels.
	x.Set(pod("b", "web-2", map[string]string{"app": "web"}))
	x.Set(pod("a", "web-1", map[string]string{"app": "web", "tier": "front"}))
	x.Set(pod("b", "db", map[string]string{"app": "db"}))
	x.Set(pod("a", "db", map[string]string{"app": "db"}))
	x.Set(pod("b", "web-1", map[string]string{"app": "web"}))
	x.Set(pod("c", "old", map[string]string{"app": "web"}))
	x.Set(pod("b", "web-2", map[string]string{"app": "api"}))
	x.Delete("c", "old")
	x.Delete("c", "never-there")

	tests := []struct {
		name, namespace, selector string
		want                      []string
	}{
		{name: "all", want: []string{"a/db", "a/web-1", "b/db", "b/web-1", "b/web-2"}},
		{name: "namespace", namespace: "b", want: []string{"b/db", "b/web-1", "b/web-2"}},
		{name: "equality", namespace: "b", selector: "app=web", want: []string{"b/web-1"}},
		{name: "relabelled pod left its old value", selector: "app=api", want: []string{"b/web-2"}},
		{name: "equality, all namespaces", selector: "app==web", want: []string{"a/web-1", "b/web-1"}},
		{name: "two requirements", selector: "app=web,tier=front", want: []string{"a/web-1"}},
		{name: "in, sorted, a value twice", namespace: "b", selector: "app in (web,db,web)", want: []string{"b/db", "b/web-1"}},
		{name: "not in: a scan", namespace: "b", selector: "app notin (web)", want: []string{"b/db", "b/web-2"}},
		{name: "exists: a scan", selector: "tier", want: []string{"a/web-1"}},
		{name: "no such value", namespace: "a", selector: "app=none", want: []string{}},
		{name: "deleted namespace", namespace: "c", want: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := labels.Parse(tc.selector)
			must(t, err)
			if diff := cmp.Diff(tc.want, keys(x.List(tc.namespace, sel))); diff != "" {
				t.Errorf("List(%q, %q) (-want +got):\n%s", tc.namespace, tc.selector, diff)
			}
		})
	}
	if got := keys(x.List("", labels.Nothing())); len(got) != 0 {
		t.Errorf("List(Nothing) = %v, want none", got)
	}
	if p, ok := x.Pod("b", "web-2"); !ok || p.Labels["app"] != "api" {
		t.Errorf("Pod(b/web-2) = %v, %v; want the replaced pod", p, ok)
	}
	if _, ok := x.Pod("c", "old"); ok {
		t.Error("Pod(c/old) found after Delete")
	}
}

// TestPodIndexByInstance: containerIDs that are instance UUIDs, bare or
// after a scheme, index their pod and container until the pod is replaced
// or deleted; a container runtime's IDs are not kept.
func TestPodIndexByInstance(t *testing.T) {
	const a, b = "0f8e7d6c-5b4a-4392-8170-a1b2c3d4e5f6", "11111111-2222-4333-8444-555555555555"
	withIDs := func(ids map[string]string) *Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		for c, id := range ids {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c, ContainerID: id})
		}
		return NewPod(p)
	}
	x := NewPodIndex()
	x.Set(withIDs(map[string]string{"app": "unikraft://" + a, "side": strings.ToUpper(b), "cri": "containerd://" + strings.Repeat("ab", 32)}))
	// look names the pod's name and container found, "" for none.
	look := func(uuid string) string {
		if got, c, ok := x.ByInstance(uuid); ok {
			return got.Name + "/" + c
		}
		return ""
	}
	checkDiff(t, "by the scheme's UUID", "p/app", look(a))
	checkDiff(t, "by a bare UUID in upper case", "p/side", look(b))
	checkDiff(t, "a runtime's ID", "", look(strings.Repeat("ab", 32)))
	x.Set(withIDs(map[string]string{"app": "unikraft://" + a}))
	checkDiff(t, "after the pod no longer names b", "", look(b))
	x.Delete("ns", "p")
	checkDiff(t, "after the pod left", "", look(a))
}

func TestPodIndexGroups(t *testing.T) {
	x := NewPodIndex()
	member := func(name, worker string) *Pod {
		return pod("ml", name, map[string]string{group.LabelName: "inf", group.LabelGroupIndex: "0", group.LabelWorkerIndex: worker})
	}
	if x.HasGroups() {
		t.Error("HasGroups of an empty index")
	}
	x.Set(member("inf-0-1", "1"))
	x.Set(member("inf-0", "0"))
	x.Set(pod("ml", "other", nil))
	checkDiff(t, "Group", []string{"ml/inf-0", "ml/inf-0-1"}, keys(x.Group("ml/inf/0")))
	if p, _ := x.Pod("ml", "inf-0"); !p.Leader() {
		t.Error("inf-0 is not a leader")
	}
	x.Delete("ml", "inf-0")
	x.Set(pod("ml", "inf-0-1", nil)) // no longer in the group
	if x.HasGroups() || len(x.Group("ml/inf/0")) != 0 {
		t.Errorf("group left with %v", keys(x.Group("ml/inf/0")))
	}
}

// TestPodIndexListNewNamespace: a namespace added after a list still
// shows in the next.
func TestPodIndexListNewNamespace(t *testing.T) {
	x := NewPodIndex()
	for i := range 3 {
		x.Set(pod(fmt.Sprintf("ns-%d", 2-i), "p", nil))
		if got := len(x.List("", labels.Everything())); got != i+1 {
			t.Fatalf("after %d namespaces, List has %d pods", i+1, got)
		}
	}
	checkDiff(t, "List", []string{"ns-0/p", "ns-1/p", "ns-2/p"}, keys(x.List("", nil)))
}

func TestNodeIndex(t *testing.T) {
	x := NewNodeIndex()
	for _, n := range []string{"n3", "n1", "n2"} {
		x.Set(NewNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": map[string]string{"n1": "x", "n2": "y", "n3": "x"}[n]}}}))
	}
	x.Delete("n2")
	got := map[string][]string{}
	for sel, nodes := range map[string][]*Node{"all": x.List(nil), "zone=x": x.List(labels.SelectorFromSet(labels.Set{"zone": "x"}))} {
		for _, n := range nodes {
			got[sel] = append(got[sel], n.Name)
		}
	}
	checkDiff(t, "List", map[string][]string{"all": {"n1", "n3"}, "zone=x": {"n1", "n3"}}, got)
	if _, ok := x.Node("n2"); ok {
		t.Error("n2 found after Delete")
	}
}

// TestPodIndexConcurrent: lists are consistent while the informer writes
// (run with -race). Every list is sorted and holds each pod once.
func TestPodIndexConcurrent(t *testing.T) {
	x := NewPodIndex()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			name := fmt.Sprintf("p-%03d", i%300)
			if i%7 == 0 {
				x.Delete(fmt.Sprintf("ns-%d", i%5), name)
				continue
			}
			x.Set(pod(fmt.Sprintf("ns-%d", i%5), name, map[string]string{"app": fmt.Sprintf("a%d", i%3)}))
		}
	}()
	sel := labels.SelectorFromSet(labels.Set{"app": "a1"})
	for range 200 {
		for _, l := range [][]*Pod{x.List("", nil), x.List("ns-1", sel)} {
			for i := 1; i < len(l); i++ {
				a, b := l[i-1], l[i]
				if a.Namespace > b.Namespace || (a.Namespace == b.Namespace && a.Name >= b.Name) {
					t.Fatalf("list out of order or with a pod twice: %s/%s before %s/%s", a.Namespace, a.Name, b.Namespace, b.Name)
				}
			}
		}
	}
	<-done
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestLabelsShared(t *testing.T) {
	a := pod("ns", "a", map[string]string{"app": "web", "pod-template-hash": "5d9c"})
	b := pod("ns", "b", map[string]string{"pod-template-hash": "5d9c", "app": "web"})
	c := pod("ns", "c", map[string]string{"app": "web"})
	d := pod("ns", "d", nil)

	if eq, ne := sameMap(a.Labels, b.Labels), sameMap(a.Labels, c.Labels); !eq || ne {
		t.Errorf("pods of equal labels share a map: %v, of different labels: %v; want true, false", eq, ne)
	}
	checkDiff(t, "labels", map[string]string{"app": "web", "pod-template-hash": "5d9c"}, b.Labels)
	checkDiff(t, "labels of a pod without labels", map[string]string(nil), d.Labels)
}

func TestLabelKeyDistinct(t *testing.T) {
	sets := []map[string]string{{"a": "bc"}, {"ab": "c"}, {"a": "b", "c": ""}, {"a": "b\x00c"}, {"a": ""}, {"": "a"}}
	seen := map[string]int{}
	for i, s := range sets {
		k := labelKey(s)
		if j, dup := seen[k]; dup {
			t.Errorf("sets %v and %v have the same key %q", sets[j], s, k)
		}
		seen[k] = i
	}
}

// TestLabelsForgotten: once no pod holds a set, the table drops it.
func TestLabelsForgotten(t *testing.T) {
	table := labelSets{sets: map[string]weak.Pointer[labelSet]{}}
	held := table.intern(map[string]string{"app": "kept"})
	table.intern(map[string]string{"app": "dropped"})
	size := func() int {
		table.mu.Lock()
		defer table.mu.Unlock()
		return len(table.sets)
	}
	if n := size(); n != 2 {
		t.Fatalf("%d sets, want 2", n)
	}
	// Cleanups run on their own goroutine after a collection: poll, with a
	// bound.
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		runtime.GC()
		return size() == 1, nil
	})
	if err != nil {
		t.Fatalf("%d sets after the unheld one was collected, want 1: %v", size(), err)
	}
	if again := table.intern(map[string]string{"app": "kept"}); again != held {
		t.Error("a held set was made again")
	}
	runtime.KeepAlive(held)
}
