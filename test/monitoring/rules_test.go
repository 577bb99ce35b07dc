package monitoring

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// Series of a cluster where all is well, one per line of a promqltest
// load block (1m apart from the Unix epoch, 4h of them): a server that
// answers and serves a certificate valid for a year, and a controller
// replica that leads and syncs every minute.
const (
	serverUp     = `up{job="group-metrics-server", pod="gms-1"} 1x240`
	servingYear  = `group_metrics_server_serving_cert_not_after_timestamp_seconds{pod="gms-1"} 31536000x240`
	leaderLeads  = `leader_election_master_status{name="group-metrics-server-cert-controller", namespace="kube-system", pod="ctrl-1"} 1x240`
	leaderSyncs  = `group_metrics_server_certs_last_sync_success_timestamp_seconds{namespace="kube-system", pod="ctrl-1"} 0+60x240`
	standbyWaits = `leader_election_master_status{name="group-metrics-server-cert-controller", namespace="kube-system", pod="ctrl-2"} 0x240`
	standbyUnset = `group_metrics_server_certs_last_sync_success_timestamp_seconds{namespace="kube-system", pod="ctrl-2"} 0x240`
	evalEnd      = 4 * time.Hour
	evalInterval = time.Minute
)

// firing loads series, evaluates every alerting rule of the kit each
// minute from the epoch to evalEnd, as a Prometheus with a 1m evaluation
// interval does (for: included), and returns the alerts firing at the end.
func firing(t *testing.T, series ...string) []string {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 1m\n  "+strings.Join(series, "\n  "))
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1e6)
	query := rules.EngineQueryFunc(engine, storage)
	var alerts []*rules.AlertingRule
	for _, g := range ruleFile(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			alerts = append(alerts, rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, slog.New(slog.DiscardHandler)))
		}
	}
	ctx := context.Background()
	for at := time.Duration(0); at <= evalEnd; at += evalInterval {
		for _, a := range alerts {
			if _, err := a.Eval(ctx, 0, time.Unix(0, 0).Add(at), query, nil, 0); err != nil {
				t.Fatalf("%s at %s: %v", a.Name(), at, err)
			}
		}
	}
	var out []string
	for _, a := range alerts {
		for _, active := range a.ActiveAlerts() {
			if active.State == rules.StateFiring {
				out = append(out, a.Name()+labelSuffix(active.Labels))
			}
		}
	}
	slices.Sort(out)
	return out
}

// labelSuffix shows an alert's pod, when it has one.
func labelSuffix(ls labels.Labels) string {
	if p := ls.Get("pod"); p != "" {
		return "{pod=" + p + "}"
	}
	return ""
}

// TestCertificateAlerts evaluates the kit's rules against the series of a
// certificate controller that leads, that does not, and that is not there,
// and of a server whose certificate nears its expiry. Every alert of the
// kit is evaluated: one that fires and is not wanted fails the case.
func TestCertificateAlerts(t *testing.T) {
	tests := []struct {
		name   string
		series []string
		want   []string
	}{
		{
			name:   "a leader that syncs, a standby, a certificate good for a year",
			series: []string{serverUp, servingYear, leaderLeads, leaderSyncs, standbyWaits, standbyUnset},
		},
		{
			name:   "a standby and no leader: the Lease was deleted and could not be created",
			series: []string{serverUp, servingYear, standbyWaits, standbyUnset},
			want:   []string{"GroupMetricsServerCertificateControllerNoLeader"},
		},
		{
			name:   "no controller replica scraped at all",
			series: []string{serverUp, servingYear},
			want:   []string{"GroupMetricsServerCertificateControllerNoLeader"},
		},
		{
			name: "a leader for three hours, then none",
			series: []string{serverUp, servingYear,
				`leader_election_master_status{name="group-metrics-server-cert-controller", namespace="kube-system", pod="ctrl-1"} 1x180 0x60`,
				`group_metrics_server_certs_last_sync_success_timestamp_seconds{namespace="kube-system", pod="ctrl-1"} 0+60x180 10800x60`},
			want: []string{"GroupMetricsServerCertificateControllerNoLeader"},
		},
		{
			name: "a leader whose syncs stopped completing an hour ago",
			series: []string{serverUp, servingYear, leaderLeads, standbyWaits, standbyUnset,
				`group_metrics_server_certs_last_sync_success_timestamp_seconds{namespace="kube-system", pod="ctrl-1"} 0+60x180 10800x60`},
			want: []string{"GroupMetricsServerCertificateSyncStalled"},
		},
		{
			name:   "the served certificate expires in 10 days, from the server's series alone",
			series: []string{serverUp, servingExpiresAfterEnd(10 * 24 * time.Hour)},
			want:   []string{"GroupMetricsServerCertificateControllerNoLeader", "GroupMetricsServerCertificateExpiring{pod=gms-1}"},
		},
		{
			name:   "the served certificate expires in a day, while a leader syncs",
			series: []string{serverUp, servingExpiresAfterEnd(24 * time.Hour), leaderLeads, leaderSyncs},
			want:   []string{"GroupMetricsServerCertificateExpiringSoon{pod=gms-1}", "GroupMetricsServerCertificateExpiring{pod=gms-1}"},
		},
		{
			name: "one replica still serves the old certificate",
			series: []string{serverUp, servingYear, leaderLeads, leaderSyncs,
				`up{job="group-metrics-server", pod="gms-2"} 1x240`,
				`group_metrics_server_serving_cert_not_after_timestamp_seconds{pod="gms-2"} ` + secondsAfterEnd(5*24*time.Hour) + `x240`},
			want: []string{"GroupMetricsServerCertificateExpiring{pod=gms-2}"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, firing(t, tt.series...)); diff != "" {
				t.Errorf("firing alerts (-want +got):\n%s", diff)
			}
		})
	}
}

// secondsAfterEnd is the Unix time d after the last evaluation.
func secondsAfterEnd(d time.Duration) string {
	return strconv.FormatInt(int64((evalEnd+d)/time.Second), 10)
}

// servingExpiresAfterEnd is the server's series of a certificate that
// expires d after the last evaluation.
func servingExpiresAfterEnd(d time.Duration) string {
	return `group_metrics_server_serving_cert_not_after_timestamp_seconds{pod="gms-1"} ` + secondsAfterEnd(d) + `x240`
}
