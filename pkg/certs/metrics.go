package certs

import (
	"errors"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Kinds of sync failure, the "kind" label of
// group_metrics_server_certs_sync_errors_total. The set is closed.
const (
	// FailureReadSecret: a Secret could not be read.
	FailureReadSecret = "read_secret"
	// FailureWriteSecret: a Secret could not be created or updated.
	FailureWriteSecret = "write_secret"
	// FailureReadAPIService: an APIService could not be read to check its
	// caBundle.
	FailureReadAPIService = "read_apiservice"
	// FailureWriteCABundle: an APIService's caBundle could not be written,
	// or a missing APIService could not be created again.
	FailureWriteCABundle = "write_cabundle"
	// FailurePlan: a certificate could not be issued.
	FailurePlan = "plan"
)

var (
	syncErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "certs",
		Name:           "sync_errors_total",
		Help:           "Failed certificate syncs, by kind (read_secret, write_secret, read_apiservice, write_cabundle, plan).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	syncs = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "certs",
		Name:           "syncs_total",
		Help:           "Certificate syncs that completed: the Secrets and every managed caBundle hold what the policy wants.",
		StabilityLevel: metrics.ALPHA,
	})
	lastSuccess = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "certs",
		Name:           "last_sync_success_timestamp_seconds",
		Help:           "Unix time of the last certificate sync that completed.",
		StabilityLevel: metrics.ALPHA,
	})
	notAfter = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "certs",
		Name:           "not_after_timestamp_seconds",
		Help:           "Unix time at which a certificate the controller keeps expires, by certificate (serving, ca), as of the last completed sync.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"certificate"})

	registerOnce sync.Once
)

// RegisterMetrics registers the certificate controller's self-metrics with
// the legacy registry; safe to call twice.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(syncErrors, syncs, lastSuccess, notAfter) })
}

// syncError is a failed step of a sync, with its kind.
type syncError struct {
	kind string
	err  error
}

func (e *syncError) Error() string { return e.err.Error() }
func (e *syncError) Unwrap() error { return e.err }

// failed wraps err with the kind of step that failed; nil stays nil.
func failed(kind string, err error) error {
	if err == nil {
		return nil
	}
	return &syncError{kind: kind, err: err}
}

// FailureKind returns the kind of a Sync error, or "" when it has none.
func FailureKind(err error) string {
	var se *syncError
	if errors.As(err, &se) {
		return se.kind
	}
	return ""
}

// recordSync publishes the outcome of one sync: the failure's kind, or the
// completed state's expiry times.
func recordSync(err error, s State, now time.Time) {
	if err != nil {
		kind := FailureKind(err)
		if kind == "" {
			kind = FailurePlan
		}
		syncErrors.WithLabelValues(kind).Inc()
		return
	}
	syncs.Inc()
	lastSuccess.Set(float64(now.Unix()))
	if s.Serving != nil && s.Serving.Cert != nil {
		notAfter.WithLabelValues("serving").Set(float64(s.Serving.Cert.NotAfter.Unix()))
	}
	if s.Active != nil && s.Active.Cert != nil {
		notAfter.WithLabelValues("ca").Set(float64(s.Active.Cert.NotAfter.Unix()))
	}
}
