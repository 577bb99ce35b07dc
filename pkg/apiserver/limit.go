package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// ReadLimit bounds the metrics API requests served at once. The scrape loop
// shares the server's CPUs with the requests, and priority and fairness is
// off (it needs cluster-wide flow-control objects): without a bound, a burst
// of large lists could delay the scrapes whose results it serves. A request
// over the bound waits for a slot up to Wait, then gets 429 with
// Retry-After, which client-go (and so the HPA and kubectl) retries.
//
// The generic apiserver's max-in-flight filter, which metrics-server relies
// on, runs too: --max-requests-inflight and --max-mutating-requests-inflight
// (400 and 200, as there) bound every request, outside this limit. It does
// not do this limit's work (k8s.io/apiserver pkg/server/filters/
// maxinflight.go, WithMaxInFlightLimit):
//   - it answers 429 at once when full; this limit lets a request wait up to
//     Wait, so a burst of HPA and kubectl lists is queued and served rather
//     than bounced into client retries;
//   - it counts every non-long-running request, health checks included: a
//     bound low enough to protect the scrapes (one read per CPU by
//     default) would fail the kubelet's /readyz and /livez probes under a
//     burst of lists and take the replica out of service; this limit counts
//     the metrics API paths only;
//   - it sits before authorization in the chain; a request takes a slot
//     here only once it is authorized.
//
// Fairness. Every identity that may read the metrics APIs (the `view` role
// has them, through system:aggregated-metrics-reader) shares the slots, and
// the server's own port takes bearer tokens directly, past kube-apiserver's
// priority and fairness. So one identity may hold at most half the shared
// slots at once (PerUser), however many requests it sends or however
// slowly it reads its answers; and the identities in Priority, the HPA's,
// have slots of their own (PriorityConcurrent) before they share the rest,
// so that no other reader can keep them waiting. An identity is the
// authenticated user name: through the aggregator, the user the aggregator
// names in its front-proxy headers; kube-controller-manager's HPA reads as
// system:serviceaccount:kube-system:horizontal-pod-autoscaler with
// --use-service-account-credentials (kubeadm's default), else as
// system:kube-controller-manager.
type ReadLimit struct {
	// Concurrent is the most requests of other identities served at once;
	// 0 means no bound.
	Concurrent int
	// Wait is the longest a request waits for a slot.
	Wait time.Duration
	// PerUser is the most of Concurrent one identity holds at once;
	// half of Concurrent (at least 1) when zero.
	PerUser int
	// Priority names the identities served first; PriorityConcurrent
	// (one when zero) of their requests have slots of their own, and
	// more share Concurrent with everyone, without the PerUser bound.
	Priority           []string
	PriorityConcurrent int
}

// DefaultPriorityReaders are the HPA controller's identities.
var DefaultPriorityReaders = []string{
	"system:serviceaccount:kube-system:horizontal-pod-autoscaler",
	"system:kube-controller-manager",
}

// limitedPrefixes are the request paths the limit applies to: the metrics
// APIs themselves, not health checks, discovery roots or /metrics.
var limitedPrefixes = []string{"/apis/metrics.k8s.io/", "/apis/custom.metrics.k8s.io/"}

func (l ReadLimit) wrap(next http.Handler) http.Handler {
	if l.Concurrent <= 0 {
		return next
	}
	slots := newFairSlots(l)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !limited(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		user := ""
		if u, ok := genericrequest.UserFrom(r.Context()); ok {
			user = u.GetName()
		}
		release, err := slots.acquire(r.Context(), user, l.Wait)
		if err != nil {
			if errors.Is(err, errWaitedTooLong) {
				readsRejected.WithLabelValues(slots.class(user)).Inc()
				tooMany(w, r)
			}
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

var errWaitedTooLong = errors.New("no slot within the wait")

// fairSlots are ReadLimit's slots: the shared ones, each identity's share
// of them, and the priority identities' own.
type fairSlots struct {
	shared, perUser, priority int
	priorityUsers             map[string]bool

	mu           sync.Mutex
	sharedUsed   int
	priorityUsed int
	byUser       map[string]int
	// freed is closed, and replaced, whenever a slot is released.
	freed chan struct{}
}

func newFairSlots(l ReadLimit) *fairSlots {
	s := &fairSlots{
		shared: l.Concurrent, perUser: l.PerUser, priority: l.PriorityConcurrent,
		priorityUsers: map[string]bool{}, byUser: map[string]int{}, freed: make(chan struct{}),
	}
	if s.perUser <= 0 {
		s.perUser = max(1, l.Concurrent/2)
	}
	if s.priority <= 0 {
		s.priority = 1
	}
	for _, u := range l.Priority {
		s.priorityUsers[u] = true
	}
	return s
}

// acquire takes a slot for user, waiting up to wait; it returns the
// function that gives the slot back, or errWaitedTooLong, or ctx's error.
func (s *fairSlots) acquire(ctx context.Context, user string, wait time.Duration) (func(), error) {
	var timer *time.Timer
	for {
		s.mu.Lock()
		release, ok := s.take(user)
		freed := s.freed
		s.mu.Unlock()
		if ok {
			if timer != nil {
				timer.Stop()
			}
			return release, nil
		}
		if timer == nil {
			readsWaited.WithLabelValues(s.class(user)).Inc()
			timer = time.NewTimer(wait)
		}
		select {
		case <-freed:
		case <-timer.C:
			return nil, errWaitedTooLong
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
	}
}

// Reader classes, the label of the limit's self-metrics: the priority
// identities' reads apart from everyone else's, so that an operator (and the
// e2e suite) sees at once whether the HPA itself ever waited or was refused.
const (
	classPriority = "priority"
	classOther    = "other"
)

func (s *fairSlots) class(user string) string {
	if s.priorityUsers[user] {
		return classPriority
	}
	return classOther
}

// take takes a slot for user if one is free to it; s.mu is held.
func (s *fairSlots) take(user string) (func(), bool) {
	if s.priorityUsers[user] {
		if s.priorityUsed < s.priority {
			s.priorityUsed++
			return func() { s.give(func() { s.priorityUsed-- }) }, true
		}
		if s.sharedUsed < s.shared {
			s.sharedUsed++
			return func() { s.give(func() { s.sharedUsed-- }) }, true
		}
		return nil, false
	}
	if s.sharedUsed >= s.shared || s.byUser[user] >= s.perUser {
		return nil, false
	}
	s.sharedUsed++
	s.byUser[user]++
	return func() {
		s.give(func() {
			s.sharedUsed--
			if s.byUser[user]--; s.byUser[user] == 0 {
				delete(s.byUser, user)
			}
		})
	}, true
}

// give runs free under s.mu and wakes every waiter to try again.
func (s *fairSlots) give(free func()) {
	s.mu.Lock()
	free()
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}

func limited(path string) bool {
	for _, p := range limitedPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

func tooMany(w http.ResponseWriter, r *http.Request) {
	err := apierrors.NewTooManyRequests("the server is serving as many metrics requests as it allows; retry shortly", 1)
	responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, r)
}

var (
	readsWaited = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "api",
		Name:           "reads_waited_total",
		Help:           "Metrics API requests that waited for a slot under --max-concurrent-reads, by reader: priority (--priority-readers) or other.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reader"})
	readsRejected = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "api",
		Name:           "reads_rejected_total",
		Help:           "Metrics API requests answered 429 after waiting for a slot under --max-concurrent-reads, by reader: priority (--priority-readers) or other.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reader"})
	registerLimitOnce sync.Once
)

// RegisterMetrics registers the API layer's self-metrics; safe to call twice.
func RegisterMetrics() {
	registerLimitOnce.Do(func() {
		legacyregistry.MustRegister(readsWaited, readsRejected)
		// Both readers from the start, so that a rate is 0, not absent,
		// until the first wait.
		for _, c := range []*metrics.CounterVec{readsWaited, readsRejected} {
			for _, reader := range []string{classPriority, classOther} {
				c.WithLabelValues(reader)
			}
		}
	})
}
