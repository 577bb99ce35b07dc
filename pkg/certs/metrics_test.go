package certs

import (
	"cmp"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestSyncMetrics makes each step of a sync fail in turn and checks that the
// failure is counted under its kind and nothing else, and that a sync that
// completes publishes the serving certificate's and the CA's expiry.
func TestSyncMetrics(t *testing.T) {
	RegisterMetrics()
	tests := []struct {
		name, wantKind string
		break_         func(*rig)
	}{
		{name: "secret unreadable", break_: refuse("get", "secrets"), wantKind: FailureReadSecret},
		{name: "secret not writable", break_: refuse("update", "secrets"), wantKind: FailureWriteSecret},
		{name: "apiservice unreadable", break_: refuse("get", "apiservices"), wantKind: FailureReadAPIService},
		{name: "caBundle not writable", break_: refuse("patch", "apiservices"), wantKind: FailureWriteCABundle},
		{name: "completes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(clocktesting.NewFakeClock(t0), newKube(), nil)
			if tt.break_ != nil {
				tt.break_(r)
			}
			want := syncCounts(t)
			_, err := r.ctrl.Sync(context.Background())
			if got := FailureKind(err); got != tt.wantKind {
				t.Fatalf("FailureKind(%v) = %q, want %q", err, got, tt.wantKind)
			}
			// A failure counts under its kind, a completed sync in syncs_total.
			want[cmp.Or(tt.wantKind, "syncs_total")]++
			if diff := gocmp.Diff(want, syncCounts(t)); diff != "" {
				t.Errorf("sync counts (-want +got):\n%s", diff)
			}
			if tt.wantKind != "" {
				return
			}
			for _, cert := range []struct{ label, secret, key string }{{"serving", servingName, KeyServingCert}, {"ca", caName, KeyCACert}} {
				c, err := parseCert(secret(t, r.kube, cert.secret).Data[cert.key])
				must(t, err)
				got, err := testutil.GetGaugeMetricValue(notAfter.WithLabelValues(cert.label))
				must(t, err)
				if want := float64(c.NotAfter.Unix()); got != want {
					t.Errorf("not_after{certificate=%q} = %v, want %v (%s)", cert.label, got, want, c.NotAfter.Format(time.RFC3339))
				}
			}
			if got, _ := testutil.GetGaugeMetricValue(lastSuccess); got != float64(t0.Unix()) {
				t.Errorf("last_sync_success_timestamp_seconds = %v, want %v", got, float64(t0.Unix()))
			}
		})
	}
}

// syncCounts are the sync error counts by kind, and syncs_total.
func syncCounts(t *testing.T) map[string]float64 {
	t.Helper()
	counters := map[string]metrics.CounterMetric{"syncs_total": syncs}
	for _, k := range []string{FailureReadSecret, FailureWriteSecret, FailureReadAPIService, FailureWriteCABundle, FailurePlan} {
		counters[k] = syncErrors.WithLabelValues(k)
	}
	out := map[string]float64{}
	for k, c := range counters {
		v, err := testutil.GetCounterMetricValue(c)
		must(t, err)
		out[k] = v
	}
	return out
}

// TestMonitoringKitCertMetrics checks that every certificate-controller
// family the monitoring kit uses (metric-names.txt) is in the registry the
// controller serves on /metrics, once a sync completed and one failed.
func TestMonitoringKitCertMetrics(t *testing.T) {
	RegisterMetrics()
	for _, fail := range []bool{false, true} {
		r := newRig(clocktesting.NewFakeClock(t0), newKube(), nil)
		if fail {
			refuse("get", "secrets")(r)
		}
		if _, err := r.ctrl.Sync(context.Background()); (err != nil) != fail {
			t.Fatalf("sync (fail=%v): %v", fail, err)
		}
	}
	families, err := legacyregistry.DefaultGatherer.Gather()
	must(t, err)
	served := map[string]bool{}
	for _, mf := range families {
		served[mf.GetName()] = len(mf.GetMetric()) > 0
	}
	b, err := os.ReadFile("../../manifests/components/monitoring/metric-names.txt")
	must(t, err)
	checked := 0
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "group_metrics_server_certs_") {
			continue
		}
		if checked++; !served[l] {
			t.Errorf("the monitoring kit uses %s, which the certificate controller does not serve", l)
		}
	}
	if checked == 0 {
		t.Error("metric-names.txt lists no certificate controller family")
	}
}

// certContent is a provider of any bytes, parsed or not.
type certContent struct{ cert []byte }

func (certContent) Name() string                              { return "test" }
func (c certContent) CurrentCertKeyContent() ([]byte, []byte) { return c.cert, nil }

var (
	_ ServingCert = certContent{}
	_ ServingCert = dynamiccertificates.CertKeyContentProvider(nil)
)

func TestServingCertCollector(t *testing.T) {
	ca, err := NewAuthority(t0, 3*time.Hour)
	must(t, err)
	pair, err := ca.Issue([]string{dnsName}, t0, time.Hour)
	must(t, err)
	const name = "group_metrics_server_serving_cert_not_after_timestamp_seconds"
	tests := []struct {
		name, want string
		cert       []byte
	}{
		{name: "the leaf's notAfter, not its CA's", cert: append(append([]byte{}, pair.CertPEM...), ca.CertPEM...), want: `
# HELP ` + name + ` [ALPHA] Unix time at which the serving certificate this server presents expires, read from it at every scrape.
# TYPE ` + name + ` gauge
` + name + ` ` + strconv.FormatInt(pair.Cert.NotAfter.Unix(), 10) + "\n"},
		{name: "none loaded: no series", cert: nil},
		{name: "not PEM: no series", cert: []byte("not a certificate")},
		{name: "a key first: no series", cert: pair.KeyPEM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewServingCertCollector(certContent{tt.cert})
			if err := testutil.CustomCollectAndCompare(c, strings.NewReader(tt.want), name); err != nil {
				t.Error(err)
			}
		})
	}
}

// step moves the clock by after, then does what, then probes.
type step struct {
	after       time.Duration
	what        func(*Health)
	ready, live bool
	narrative   string
}

func renewal(holder string, at time.Time) func(*Health) {
	return func(h *Health) {
		h.observed(&resourcelock.LeaderElectionRecord{HolderIdentity: holder, RenewTime: metav1.NewTime(at)})
	}
}

func TestHealth(t *testing.T) {
	synced := func(err error) func(*Health) { return func(h *Health) { h.synced(err) } }
	lead := func(h *Health) { h.StartedLeading() }
	boom := errors.New("boom")
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "a standby that sees the leader renew stays ready", steps: []step{
			{after: 0, ready: true, live: true, narrative: "just started"},
			{after: 40 * time.Second, what: renewal("a", t0.Add(40*time.Second)), ready: true, live: true},
			{after: 40 * time.Second, what: renewal("a", t0.Add(80*time.Second)), ready: true, live: true},
		}},
		{name: "a standby that sees no renewal turns unready, never unlive", steps: []step{
			{after: 40 * time.Second, what: renewal("a", t0), ready: true, live: true},
			{after: 40 * time.Second, what: renewal("a", t0), ready: true, live: true, narrative: "the same RenewTime again"},
			{after: 6 * time.Second, ready: false, live: true, narrative: "46s since the first observation"},
			{after: time.Hour, ready: false, live: true},
			{after: 0, what: renewal("", t0.Add(time.Hour)), ready: false, live: true, narrative: "a released Lease has no holder"},
			{after: 0, what: renewal("b", t0.Add(time.Hour)), ready: true, live: true},
		}},
		{name: "no Lease read at all turns a standby unready", steps: []step{
			{after: 45 * time.Second, ready: true, live: true},
			{after: time.Second, ready: false, live: true},
		}},
		{name: "a leader that syncs is ready", steps: []step{
			{after: time.Hour, what: lead, ready: true, live: true, narrative: "leading starts the bound afresh"},
			{after: 40 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 40 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 45 * time.Second, ready: true, live: true},
		}},
		{name: "a leader whose syncs fail is unready but live", steps: []step{
			{after: 0, what: lead, ready: true, live: true},
			{after: 15 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 30 * time.Second, what: synced(boom), ready: true, live: true},
			{after: 16 * time.Second, what: synced(boom), ready: false, live: true},
			{after: 10 * time.Minute, what: synced(boom), ready: false, live: true},
			{after: 0, what: synced(nil), ready: true, live: true},
		}},
		{name: "a leader whose sync hangs is unlive, and a standby is not", steps: []step{
			{after: 0, what: lead, ready: true, live: true},
			{after: 5 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 5 * time.Minute, ready: false, live: true},
			{after: time.Second, ready: false, live: false},
			{after: 0, what: func(h *Health) { h.StoppedLeading() }, ready: false, live: true, narrative: "no renewal seen since leading started"},
		}},
		{name: "a leader that never returns from its first sync is unlive", steps: []step{
			{after: time.Minute, what: lead, ready: true, live: true},
			{after: 5*time.Minute + time.Second, ready: false, live: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			h := NewHealth(HealthConfig{ReadyWithin: 45 * time.Second, LiveWithin: 5 * time.Minute, Clock: clk})
			type probe struct{ Ready, Live bool }
			for i, s := range tt.steps {
				clk.Step(s.after)
				if s.what != nil {
					s.what(h)
				}
				got := probe{Ready: h.Ready(nil) == nil, Live: h.Live(nil) == nil}
				if diff := gocmp.Diff(probe{Ready: s.ready, Live: s.live}, got); diff != "" {
					t.Errorf("step %d (%s; ready: %v, live: %v) (-want +got):\n%s", i, s.narrative, h.Ready(nil), h.Live(nil), diff)
				}
			}
		})
	}
}

// TestHealthFollowsSyncs runs the controller's own Sync: a sync that
// cannot read its Secrets leaves the replica live but, past the bound,
// unready.
func TestHealthFollowsSyncs(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := newRig(clk, newKube(), nil)
	h := NewHealth(HealthConfig{ReadyWithin: 45 * time.Second, LiveWithin: 5 * time.Minute, Clock: clk})
	r.ctrl.cfg.Health = h
	h.StartedLeading()
	r.sync(t)
	refuse("get", "secrets")(r)
	for range 4 {
		clk.Step(15 * time.Second)
		if _, err := r.ctrl.Sync(context.Background()); err == nil {
			t.Fatal("sync succeeded without its Secrets")
		}
	}
	if ready, live := h.Ready(nil), h.Live(nil); ready == nil || live != nil {
		t.Errorf("after 60s of failed syncs: ready %v, live %v; want unready and live", ready, live)
	}
}
