package podcache

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"weak"
)

// labelSet is one set of labels, shared by every cached pod that carries
// exactly those labels. Its map is never modified.
type labelSet struct{ labels map[string]string }

// labelSets interns the pods' label maps. The pods of one ReplicaSet, Job or
// DaemonSet carry the same labels, and a decoded map of even one label takes
// some 340 bytes, a quarter of what a cached pod costs
// (BenchmarkPodCacheMemory). Like the standard library's unique package, the
// table is process-wide and holds its sets weakly: a set lives while a pod
// holds it, and a cleanup forgets it once the last such pod is gone, so
// churn leaves nothing behind.
type labelSets struct {
	mu   sync.Mutex
	sets map[string]weak.Pointer[labelSet]
}

var internedLabels = labelSets{sets: map[string]weak.Pointer[labelSet]{}}

// intern returns the shared set equal to in, making it from in when there
// is none; nil for no labels. in must not be modified afterwards.
func (t *labelSets) intern(in map[string]string) *labelSet {
	if len(in) == 0 {
		return nil
	}
	key := labelKey(in)
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sets[key].Value(); s != nil {
		return s
	}
	s := &labelSet{labels: in}
	t.sets[key] = weak.Make(s)
	runtime.AddCleanup(s, t.forget, key)
	return s
}

// forget drops key once its set has been collected, unless a new set took
// its place meanwhile.
func (t *labelSets) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sets[key].Value() == nil {
		delete(t.sets, key)
	}
}

// labelKey encodes a label set: keys sorted, each key and value preceded
// by its length, so that no two sets share a key whatever they hold.
func labelKey(in map[string]string) string {
	keys := make([]string, 0, len(in))
	n := 0
	for k, v := range in {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		v := in[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return string(b)
}
