package apiserver

import (
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
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
type ReadLimit struct {
	// Concurrent is the most requests served at once; 0 means no bound.
	Concurrent int
	// Wait is the longest a request waits for a slot.
	Wait time.Duration
}

// limitedPrefixes are the request paths the limit applies to: the metrics
// APIs themselves, not health checks, discovery roots or /metrics.
var limitedPrefixes = []string{"/apis/metrics.k8s.io/", "/apis/custom.metrics.k8s.io/"}

func (l ReadLimit) wrap(next http.Handler) http.Handler {
	if l.Concurrent <= 0 {
		return next
	}
	slots := make(chan struct{}, l.Concurrent)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !limited(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			readsWaited.Inc()
			t := time.NewTimer(l.Wait)
			select {
			case slots <- struct{}{}:
				t.Stop()
			case <-t.C:
				readsRejected.Inc()
				tooMany(w, r)
				return
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		defer func() { <-slots }()
		next.ServeHTTP(w, r)
	})
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
	readsWaited = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "api",
		Name:           "reads_waited_total",
		Help:           "Metrics API requests that waited for a slot under --max-concurrent-reads.",
		StabilityLevel: metrics.ALPHA,
	})
	readsRejected = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "api",
		Name:           "reads_rejected_total",
		Help:           "Metrics API requests answered 429 after waiting for a slot under --max-concurrent-reads.",
		StabilityLevel: metrics.ALPHA,
	})
	registerLimitOnce sync.Once
)

// RegisterMetrics registers the API layer's self-metrics; safe to call twice.
func RegisterMetrics() {
	registerLimitOnce.Do(func() { legacyregistry.MustRegister(readsWaited, readsRejected) })
}
