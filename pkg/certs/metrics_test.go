package certs

import (
	"cmp"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
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
		name     string
		break_   func(*rig)
		wantKind string
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
		checked++
		if !served[l] {
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
		name string
		cert []byte
		want string
	}{
		{
			name: "the leaf's notAfter, not its CA's",
			cert: append(append([]byte{}, pair.CertPEM...), ca.CertPEM...),
			want: `
# HELP ` + name + ` [ALPHA] Unix time at which the serving certificate this server presents expires, read from it at every scrape.
# TYPE ` + name + ` gauge
` + name + ` ` + strconv.FormatInt(pair.Cert.NotAfter.Unix(), 10) + "\n",
		},
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
