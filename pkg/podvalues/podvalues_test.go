package podvalues

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// scripted returns its batches one per Collect and reports each call.
type scripted struct {
	batches []promscrape.Batch
	errs    [][]promscrape.TargetError
	calls   chan int
	n       int
}

func (s *scripted) Collect(context.Context) (promscrape.Batch, []promscrape.TargetError) {
	i := min(s.n, len(s.batches)-1)
	s.n++
	var errs []promscrape.TargetError
	if i < len(s.errs) {
		errs = s.errs[i]
	}
	if s.calls != nil {
		s.calls <- s.n
	}
	return s.batches[i], errs
}

func batch(pods ...promscrape.PodValues) promscrape.Batch { return promscrape.Batch{Pods: pods} }

func pod(name string, waiting float64) promscrape.PodValues {
	return promscrape.PodValues{Namespace: "ns", Name: name, UID: name + "-1", Values: []promscrape.Value{
		{Metric: "waiting", Value: waiting, Timestamp: t0, Series: 1},
	}}
}

// read is what the store serves for the pods and metric asked, the pods
// read as the cache knows them (uids; "" for any pod).
func read(s *Store, metric string, uids map[string]string, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, n := range names {
		if v, ok := s.Value("ns", n, uids[n], metric); ok {
			out[n] = v.Value
		}
	}
	return out
}

func TestStoreUpdate(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	// cached is the pod cache: name -> UID.
	cached := map[string]string{"a": "a-1", "b": "b-1", "c": "c-1"}
	st := NewStore(StoreConfig{Clock: clk, StaleAfter: 25 * time.Second, PodUID: func(_, name string) (string, bool) {
		uid, ok := cached[name]
		return uid, ok
	}})
	all := []string{"a", "b", "c"}
	steps := []struct {
		name    string
		advance time.Duration
		update  *promscrape.Batch
		// gone leaves the cache; recreated is replaced by a pod of the
		// same name and another UID.
		gone, recreated string
		want            map[string]float64
		wantLen         int
	}{
		{"first batch", 0, ptr(batch(pod("a", 1), pod("b", 2))), "", "", map[string]float64{"a": 1, "b": 2}, 2},
		{"a pod missing from a batch keeps its value", 10 * time.Second, ptr(batch(pod("a", 3))), "", "", map[string]float64{"a": 3, "b": 2}, 2},
		{"until it is stale on read", 16 * time.Second, nil, "", "", map[string]float64{"a": 3}, 2},
		{"and dropped at the next update", 0, ptr(batch(pod("a", 4), pod("c", 5))), "", "", map[string]float64{"a": 4, "c": 5}, 2},
		{"a pod gone from the cache is dropped", 5 * time.Second, ptr(batch(pod("a", 6))), "c", "", map[string]float64{"a": 6}, 1},
		{"a recreated pod is not served its predecessor's values", time.Second, nil, "", "a", map[string]float64{}, 1},
		{"which go at the next update", time.Second, ptr(batch()), "", "", map[string]float64{}, 0},
	}
	for _, s := range steps {
		clk.Step(s.advance)
		if s.gone != "" {
			delete(cached, s.gone)
		}
		if s.recreated != "" {
			cached[s.recreated] = s.recreated + "-2"
		}
		if s.update != nil {
			st.Update(*s.update)
		}
		if diff := cmp.Diff(s.want, read(st, "waiting", cached, all...)); diff != "" {
			t.Errorf("%s: values (-want +got):\n%s", s.name, diff)
		}
		if got := st.Len(); got != s.wantLen {
			t.Errorf("%s: Len = %d, want %d", s.name, got, s.wantLen)
		}
	}
	st.Update(batch(pod("b", 7)))
	if _, ok := st.Value("ns", "b", "", "other"); ok {
		t.Error("a metric the pod has no value of was served")
	}
}

func ptr[T any](v T) *T { return &v }

// TestLoopTicks runs the loop on a fake clock: it collects at once, then
// at every interval and not before, and each collection reaches the store.
func TestLoopTicks(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	src := &scripted{
		batches: []promscrape.Batch{batch(pod("a", 1)), batch(pod("a", 2)), batch(pod("a", 3))},
		calls:   make(chan int, 10),
	}
	st := NewStore(StoreConfig{Clock: clk, StaleAfter: time.Minute})
	loop := NewLoop(LoopConfig{Source: src, Store: st, Clock: clk, Interval: 15 * time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { loop.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	wait := func(want int) {
		t.Helper()
		select {
		case n := <-src.calls:
			if n != want {
				t.Fatalf("collection %d, want %d", n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("collection %d did not happen", want)
		}
	}
	wait(1)
	for i := 2; i <= 3; i++ {
		eventually(t, "the loop never waited on its ticker", clk.HasWaiters)
		clk.Step(14 * time.Second)
		select {
		case n := <-src.calls:
			t.Fatalf("collection %d before the interval", n)
		default:
		}
		clk.Step(time.Second)
		wait(i)
	}
	// The store is updated after Collect returns.
	eventually(t, "the store never held a=3", func() bool { return read(st, "waiting", nil, "a")["a"] == 3 })
}

// eventually waits, bounded, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// TestLoopFailures checks which failures are remembered from tick to tick:
// the log is written when the set changes, so Failing must follow each
// tick exactly.
func TestLoopFailures(t *testing.T) {
	e := func(id, reason string) promscrape.TargetError {
		return promscrape.TargetError{ID: id, Reason: reason, Err: errors.New(reason)}
	}
	src := &scripted{
		batches: []promscrape.Batch{batch(), batch(), batch(), batch()},
		errs: [][]promscrape.TargetError{
			{e("pod/ns/a", "timeout")},
			{e("pod/ns/a", "timeout"), e("pod/ns/b", "connection")},
			{e("pod/ns/a", "http_status")},
			nil,
		},
	}
	clk := clocktesting.NewFakeClock(t0)
	loop := NewLoop(LoopConfig{Source: src, Store: NewStore(StoreConfig{Clock: clk, StaleAfter: time.Minute}), Clock: clk, Interval: time.Second})
	want := []map[string]string{
		{"pod/ns/a": "timeout"},
		{"pod/ns/a": "timeout", "pod/ns/b": "connection"},
		{"pod/ns/a": "http_status"},
		{},
	}
	for i, w := range want {
		loop.Tick(t.Context())
		if diff := cmp.Diff(w, loop.Failing()); diff != "" {
			t.Errorf("tick %d: failing (-want +got):\n%s", i+1, diff)
		}
	}
}
