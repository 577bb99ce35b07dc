package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// limitRig is a ReadLimit in front of a handler that reports each request
// it enters, by its user's name or else its path, and holds those asking
// for ?block until release.
type limitRig struct {
	t       *testing.T
	h       http.Handler
	entered chan string
	release chan struct{}
	first   <-chan int
}

func newRig(t *testing.T, limit ReadLimit) *limitRig {
	rig := &limitRig{t: t, entered: make(chan string, 16), release: make(chan struct{})}
	rig.h = limit.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := genericrequest.UserFrom(r.Context()); ok {
			rig.entered <- u.GetName()
		} else {
			rig.entered <- r.URL.Path
		}
		if r.URL.Query().Has("block") {
			<-rig.release
		}
		w.WriteHeader(http.StatusOK)
	}))
	return rig
}

// newLimitRig is a rig of one slot whose first read takes the slot and
// stays in the handler.
func newLimitRig(t *testing.T, wait time.Duration) *limitRig {
	rig := newRig(t, ReadLimit{Concurrent: 1, Wait: wait})
	rig.first = rig.serve("", "/apis/metrics.k8s.io/v1beta1/pods?block")
	rig.enter("first read", "/apis/metrics.k8s.io/v1beta1/pods")
	return rig
}

// serve serves path, as the user name if not "".
func (rig *limitRig) serve(name, path string) <-chan int {
	done := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if name != "" {
			r = r.WithContext(genericrequest.WithUser(r.Context(), &user.DefaultInfo{Name: name}))
		}
		rig.h.ServeHTTP(rec, r)
		done <- rec.Code
	}()
	return done
}

// receive returns the next value of ch; the bound only catches a hang.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30s", what)
		panic("unreachable")
	}
}

// enter checks the path of the next request the handler entered.
func (rig *limitRig) enter(what, want string) {
	rig.t.Helper()
	if got := receive(rig.t, what+" reaching the handler", rig.entered); got != want {
		rig.t.Fatalf("%s: entered %s, want %s", what, got, want)
	}
}

// answers checks the status of a request.
func (rig *limitRig) answers(what string, ch <-chan int, want int) {
	rig.t.Helper()
	if code := receive(rig.t, what+" finishing", ch); code != want {
		rig.t.Errorf("%s = %d, want %d", what, code, want)
	}
}

// releaseFirst lets the first read finish, and checks it was served.
func (rig *limitRig) releaseFirst() {
	rig.t.Helper()
	close(rig.release)
	rig.answers("first read", rig.first, http.StatusOK)
}

// noneEntered checks that no request is in the handler but those seen.
func (rig *limitRig) noneEntered(what string) {
	rig.t.Helper()
	select {
	case p := <-rig.entered:
		rig.t.Fatalf("%s: %s reached the handler", what, p)
	default:
	}
}

// waitedRejected are reads_waited_total and reads_rejected_total of
// readers other than the priority ones.
func waitedRejected(t *testing.T) [2]float64 {
	t.Helper()
	var out [2]float64
	for i, c := range []*metrics.CounterVec{readsWaited, readsRejected} {
		v, err := testutil.GetCounterMetricValue(c.WithLabelValues(classOther))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

func TestReadLimitUnlimitedPaths(t *testing.T) {
	rig := newLimitRig(t, time.Minute)
	// Health checks, /metrics and discovery roots take no slot.
	for _, p := range []string{"/readyz", "/metrics", "/apis"} {
		rig.answers(p+" while the slot is taken", rig.serve("", p), http.StatusOK)
		rig.enter(p, p)
	}
	rig.releaseFirst()
}

// TestReadLimitRejectsAfterWait: with the slot held throughout, a read
// waits its bound and is told to retry; it never reaches the handler.
func TestReadLimitRejectsAfterWait(t *testing.T) {
	RegisterMetrics()
	rig := newLimitRig(t, 50*time.Millisecond)
	before := waitedRejected(t)
	rig.answers("second read", rig.serve("", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/*/m"), http.StatusTooManyRequests)
	if got, want := waitedRejected(t), [2]float64{before[0] + 1, before[1] + 1}; got != want {
		t.Errorf("reads waited and rejected = %v, want %v", got, want)
	}
	rig.noneEntered("the rejected read")
	rig.releaseFirst()
}

// TestReadLimitServesAfterWaiting: a read that arrives while the slot is
// held waits (reads_waited_total counts it before it blocks), stays out of
// the handler until the slot is freed, and is then served. Its bound is a
// minute, so a loaded machine cannot turn the wait into a 429.
func TestReadLimitServesAfterWaiting(t *testing.T) {
	RegisterMetrics()
	rig := newLimitRig(t, time.Minute)
	before := waitedRejected(t)
	third := rig.serve("", "/apis/metrics.k8s.io/v1/nodes")
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return waitedRejected(t)[0] > before[0], nil
	}); err != nil {
		t.Fatalf("the third read never waited: %v", err)
	}
	rig.noneEntered("while the slot was taken")
	select {
	case code := <-third:
		t.Fatalf("third read answered %d while the slot was taken", code)
	default:
	}
	rig.releaseFirst()
	rig.enter("third read", "/apis/metrics.k8s.io/v1/nodes")
	rig.answers("third read once the slot was free", third, http.StatusOK)
	if got, want := waitedRejected(t), [2]float64{before[0] + 1, before[1]}; got != want {
		t.Errorf("reads waited and rejected = %v, want %v", got, want)
	}
}

// TestReadLimitFairness: one identity holds at most PerUser slots however
// many reads it sends, so another identity is served beside it; the HPA's
// identity has a slot of its own while every shared slot is taken, and
// waits like anyone once it is taken too.
func TestReadLimitFairness(t *testing.T) {
	rig := newRig(t, ReadLimit{Concurrent: 4, Wait: 200 * time.Millisecond, Priority: DefaultPriorityReaders})
	serve := func(name string) <-chan int { return rig.serve(name, "/apis/metrics.k8s.io/v1beta1/pods?block") }
	// The viewer's third read finds its two slots taken and gets 429
	// after the wait, while two shared slots stay free.
	viewer := []<-chan int{serve("viewer"), serve("viewer")}
	for range viewer {
		rig.enter("viewer's read", "viewer")
	}
	rig.answers("viewer's third read", serve("viewer"), http.StatusTooManyRequests)
	// Another identity takes the other two shared slots; with every
	// shared slot taken, the HPA is served on its own slot at once.
	other := []<-chan int{serve("other"), serve("other")}
	for range other {
		rig.enter("other's read", "other")
	}
	hpa := serve(DefaultPriorityReaders[0])
	rig.enter("the HPA's read", DefaultPriorityReaders[0])
	// Its second read has no slot left anywhere, and is counted as the
	// priority readers'.
	RegisterMetrics()
	rejected := func() float64 {
		v, err := testutil.GetCounterMetricValue(readsRejected.WithLabelValues(classPriority))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := rejected()
	rig.answers("the HPA's second read", serve(DefaultPriorityReaders[1]), http.StatusTooManyRequests)
	if got := rejected() - before; got != 1 {
		t.Errorf("priority reads rejected went up by %v, want 1", got)
	}
	close(rig.release)
	for _, ch := range append(append(viewer, other...), hpa) {
		rig.answers("a held read", ch, http.StatusOK)
	}
}
