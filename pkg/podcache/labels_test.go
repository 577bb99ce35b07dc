package podcache

import (
	"context"
	"reflect"
	"runtime"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

func labelledPod(name string, labels map[string]string) *Pod {
	return NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}})
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestLabelsShared(t *testing.T) {
	a := labelledPod("a", map[string]string{"app": "web", "pod-template-hash": "5d9c"})
	b := labelledPod("b", map[string]string{"pod-template-hash": "5d9c", "app": "web"})
	c := labelledPod("c", map[string]string{"app": "web"})
	d := labelledPod("d", nil)

	if !sameMap(a.Labels, b.Labels) {
		t.Error("pods of equal labels hold two maps, want one")
	}
	if sameMap(a.Labels, c.Labels) {
		t.Error("pods of different labels share a map")
	}
	if want := map[string]string{"app": "web", "pod-template-hash": "5d9c"}; !reflect.DeepEqual(b.Labels, want) {
		t.Errorf("labels %v, want %v", b.Labels, want)
	}
	if d.Labels != nil {
		t.Errorf("a pod without labels has %v", d.Labels)
	}
}

func TestLabelKeyDistinct(t *testing.T) {
	sets := []map[string]string{
		{"a": "bc"},
		{"ab": "c"},
		{"a": "b", "c": ""},
		{"a": "b\x00c"},
		{"a": ""},
		{"": "a"},
	}
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
