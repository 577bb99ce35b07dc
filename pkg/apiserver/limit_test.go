package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// limitRig is one ReadLimit of one slot in front of a handler that reports
// each request it enters and holds those asking for ?block until release.
type limitRig struct {
	t       *testing.T
	h       http.Handler
	entered chan string
	release chan struct{}
}

func newLimitRig(t *testing.T, wait time.Duration) *limitRig {
	rig := &limitRig{t: t, entered: make(chan string, 8), release: make(chan struct{})}
	rig.h = ReadLimit{Concurrent: 1, Wait: wait}.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.entered <- r.URL.Path
		if r.URL.Query().Has("block") {
			<-rig.release
		}
		w.WriteHeader(http.StatusOK)
	}))
	return rig
}

func (rig *limitRig) serve(path string) <-chan int {
	done := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		rig.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		done <- rec.Code
	}()
	return done
}

// code returns the status of a request; the bound only catches a hang.
func (rig *limitRig) code(what string, ch <-chan int) int {
	rig.t.Helper()
	select {
	case code := <-ch:
		return code
	case <-time.After(30 * time.Second):
		rig.t.Fatalf("%s did not finish", what)
		return 0
	}
}

// enter returns the path of the next request the handler entered.
func (rig *limitRig) enter(what string) string {
	rig.t.Helper()
	select {
	case p := <-rig.entered:
		return p
	case <-time.After(30 * time.Second):
		rig.t.Fatalf("%s never reached the handler", what)
		return ""
	}
}

// holdSlot sends a list that takes the only slot and stays in the handler.
func (rig *limitRig) holdSlot() <-chan int {
	rig.t.Helper()
	first := rig.serve("/apis/metrics.k8s.io/v1beta1/pods?block")
	if p := rig.enter("first read"); p != "/apis/metrics.k8s.io/v1beta1/pods" {
		rig.t.Fatalf("entered %s", p)
	}
	return first
}

func counterValue(t *testing.T, c metrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestReadLimitUnlimitedPaths(t *testing.T) {
	rig := newLimitRig(t, time.Minute)
	first := rig.holdSlot()
	// Health checks, /metrics and discovery roots take no slot.
	for _, p := range []string{"/readyz", "/metrics", "/apis"} {
		if code := rig.code(p, rig.serve(p)); code != http.StatusOK {
			t.Errorf("%s = %d while the slot is taken, want 200", p, code)
		}
		if got := rig.enter(p); got != p {
			t.Errorf("entered %s, want %s", got, p)
		}
	}
	close(rig.release)
	if code := rig.code("first read", first); code != http.StatusOK {
		t.Errorf("first read = %d", code)
	}
}

// TestReadLimitRejectsAfterWait: with the slot held throughout, a read
// waits its bound and is told to retry; it never reaches the handler.
func TestReadLimitRejectsAfterWait(t *testing.T) {
	RegisterMetrics()
	rig := newLimitRig(t, 50*time.Millisecond)
	first := rig.holdSlot()
	waited, rejected := counterValue(t, readsWaited), counterValue(t, readsRejected)
	if code := rig.code("second read", rig.serve("/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/*/m")); code != http.StatusTooManyRequests {
		t.Errorf("second read = %d, want 429", code)
	}
	if d := counterValue(t, readsWaited) - waited; d != 1 {
		t.Errorf("reads_waited_total grew by %v, want 1", d)
	}
	if d := counterValue(t, readsRejected) - rejected; d != 1 {
		t.Errorf("reads_rejected_total grew by %v, want 1", d)
	}
	select {
	case p := <-rig.entered:
		t.Errorf("rejected read reached the handler (%s)", p)
	default:
	}
	close(rig.release)
	if code := rig.code("first read", first); code != http.StatusOK {
		t.Errorf("first read = %d", code)
	}
}

// TestReadLimitServesAfterWaiting: a read that arrives while the slot is
// held waits (reads_waited_total counts it before it blocks), stays out of
// the handler until the slot is freed, and is then served. Its bound is a
// minute, so a loaded machine cannot turn the wait into a 429.
func TestReadLimitServesAfterWaiting(t *testing.T) {
	RegisterMetrics()
	rig := newLimitRig(t, time.Minute)
	first := rig.holdSlot()
	waited, rejected := counterValue(t, readsWaited), counterValue(t, readsRejected)
	third := rig.serve("/apis/metrics.k8s.io/v1/nodes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
		return counterValue(t, readsWaited) > waited, nil
	}); err != nil {
		t.Fatalf("the third read never waited: %v", err)
	}
	select {
	case p := <-rig.entered:
		t.Fatalf("%s was served while the slot was taken", p)
	case code := <-third:
		t.Fatalf("third read answered %d while the slot was taken", code)
	default:
	}
	close(rig.release)
	if code := rig.code("first read", first); code != http.StatusOK {
		t.Errorf("first read = %d", code)
	}
	if p := rig.enter("third read"); p != "/apis/metrics.k8s.io/v1/nodes" {
		t.Errorf("entered %s, want the third read", p)
	}
	if code := rig.code("third read", third); code != http.StatusOK {
		t.Errorf("third read = %d, want 200 once the slot was free", code)
	}
	if d := counterValue(t, readsWaited) - waited; d != 1 {
		t.Errorf("reads_waited_total grew by %v, want 1", d)
	}
	if d := counterValue(t, readsRejected) - rejected; d != 0 {
		t.Errorf("reads_rejected_total grew by %v, want 0", d)
	}
}
