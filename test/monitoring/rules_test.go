package monitoring

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
)

// Series of a cluster where all is well, in promqltest's series notation
// (one value every sampleInterval from the Unix epoch, 4h of them): a
// server that answers and serves a certificate valid for a year, and a
// controller replica that leads and syncs every minute.
var (
	serverUp     = `up{job="group-metrics-server", pod="gms-1"} 1x240`
	servingYear  = serving("gms-1", "31536000x240")
	leaderLeads  = leads("ctrl-1", "1x240")
	leaderSyncs  = syncs("ctrl-1", "0+60x240")
	standbyWaits = leads("ctrl-2", "0x240")
	standbyUnset = syncs("ctrl-2", "0x240")
)

const (
	evalEnd      = 4 * time.Hour
	evalInterval = time.Minute
)

// leads, syncs and serving are a controller replica's leader election
// status, its last successful sync and a server's certificate expiry.
func leads(pod, values string) string {
	return `leader_election_master_status{name="group-metrics-server-cert-controller", namespace="kube-system", pod="` + pod + `"} ` + values
}

func syncs(pod, values string) string {
	return `group_metrics_server_certs_last_sync_success_timestamp_seconds{namespace="kube-system", pod="` + pod + `"} ` + values
}

func serving(pod, values string) string {
	return `group_metrics_server_serving_cert_not_after_timestamp_seconds{pod="` + pod + `"} ` + values
}

// firing loads series, evaluates every alerting rule of the kit each
// minute from the epoch to evalEnd, as a Prometheus with a 1m evaluation
// interval does (for: included), and returns the alerts firing at the end.
func firing(t *testing.T, series ...string) []string {
	t.Helper()
	queryable := load(t, series...)
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples:               1e6,
		Timeout:                  time.Minute,
		LookbackDelta:            5 * time.Minute,
		NoStepSubqueryIntervalFn: func(int64) int64 { return evalInterval.Milliseconds() },
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
	})
	t.Cleanup(func() {
		if err := engine.Close(); err != nil {
			t.Error(err)
		}
	})
	var alerts []*alertingRule
	for _, g := range ruleFile(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.KeepFiringFor != 0 {
				t.Fatalf("%s: keep_firing_for is not evaluated by this test; add it to alertingRule", r.Alert)
			}
			for name, value := range r.Labels {
				if strings.Contains(value, "{{") {
					t.Fatalf("%s: label %s is a template; this test does not expand label templates", r.Alert, name)
				}
			}
			alerts = append(alerts, &alertingRule{name: r.Alert, expr: r.Expr, hold: time.Duration(r.For),
				labels: labels.FromMap(r.Labels), active: map[uint64]*activeAlert{}})
		}
	}
	ctx := context.Background()
	for at := time.Duration(0); at <= evalEnd; at += evalInterval {
		for _, a := range alerts {
			if err := a.eval(ctx, engine, queryable, time.Unix(0, 0).Add(at)); err != nil {
				t.Fatalf("%s at %s: %v", a.name, at, err)
			}
		}
	}
	var out []string
	for _, a := range alerts {
		for _, active := range a.active {
			// An alert's pod, when it has one, tells replicas apart.
			if pod := active.labels.Get("pod"); active.firing && pod != "" {
				out = append(out, a.name+"{pod="+pod+"}")
			} else if active.firing {
				out = append(out, a.name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// alertingRule is an alerting rule with the state Prometheus keeps for it
// between evaluations, as rules.AlertingRule.Eval in
// github.com/prometheus/prometheus v0.316.0 (rules/alerting.go) defines it:
// an element of the expression's result is an alert, identified by its
// labels without __name__, with the rule's labels and alertname added. It
// is pending from the first evaluation that returns it (ActiveAt) and
// firing from the first one at least for: later, if every evaluation in
// between returned it; one that returns it no longer ends it (a pending
// alert is dropped, a firing one resolved, and either starts pending
// again if it comes back). keep_firing_for: is left out: no rule of the
// kit sets it, and firing fails when one does.
type alertingRule struct {
	name, expr string
	hold       time.Duration
	labels     labels.Labels
	active     map[uint64]*activeAlert
}

// activeAlert is a pending or firing alert of a rule.
type activeAlert struct {
	labels   labels.Labels
	activeAt time.Time
	firing   bool
}

// eval evaluates the rule's expression as an instant query at ts and moves
// its alerts on. A scalar result is one element without labels, as
// rules.EngineQueryFunc makes it; two elements that differ only in __name__
// or in labels the rule sets are rules.ErrDuplicateAlertLabelSet.
func (r *alertingRule) eval(ctx context.Context, engine *promql.Engine, q storage.Queryable, ts time.Time) error {
	query, err := engine.NewInstantQuery(ctx, q, nil, r.expr, ts)
	if err != nil {
		return err
	}
	defer query.Close()
	res := query.Exec(ctx)
	if res.Err != nil {
		return res.Err
	}
	result, ok := res.Value.(promql.Vector)
	if v, isScalar := res.Value.(promql.Scalar); isScalar {
		result, ok = promql.Vector{{T: v.T, F: v.V, Metric: labels.EmptyLabels()}}, true
	}
	if !ok {
		return errors.New("rule result is not a vector or scalar")
	}
	returned := make(map[uint64]bool, len(result))
	for _, s := range result {
		lb := labels.NewBuilder(s.Metric).Del(labels.MetricName)
		r.labels.Range(func(l labels.Label) { lb.Set(l.Name, l.Value) })
		ls := lb.Set(labels.AlertName, r.name).Labels()
		h := ls.Hash()
		if returned[h] {
			return errors.New("vector contains metrics with the same labelset after applying alert labels")
		}
		returned[h] = true
		if _, ok := r.active[h]; !ok {
			r.active[h] = &activeAlert{labels: ls, activeAt: ts}
		}
	}
	for h, a := range r.active {
		if !returned[h] {
			delete(r.active, h)
			continue
		}
		a.firing = ts.Sub(a.activeAt) >= r.hold
	}
	return nil
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
			name:   "a leader for three hours, then none",
			series: []string{serverUp, servingYear, leads("ctrl-1", "1x180 0x60"), syncs("ctrl-1", "0+60x180 10800x60")},
			want:   []string{"GroupMetricsServerCertificateControllerNoLeader"},
		},
		// for: 15m holds the no-leader alert: at the last evaluation the
		// leader has been gone 14 minutes in the first case, 15 in the
		// second (the series load one value a minute).
		{
			name:   "no leader for 14 minutes: pending, not firing",
			series: []string{serverUp, servingYear, leads("ctrl-1", "1x225 0x14"), leaderSyncs},
		},
		{
			name:   "no leader for 15 minutes: firing",
			series: []string{serverUp, servingYear, leads("ctrl-1", "1x224 0x15"), leaderSyncs},
			want:   []string{"GroupMetricsServerCertificateControllerNoLeader"},
		},
		{
			name:   "a leader whose syncs stopped completing an hour ago",
			series: []string{serverUp, servingYear, leaderLeads, standbyWaits, standbyUnset, syncs("ctrl-1", "0+60x180 10800x60")},
			want:   []string{"GroupMetricsServerCertificateSyncStalled"},
		},
		{
			name:   "the served certificate expires in 10 days, from the server's series alone",
			series: []string{serverUp, serving("gms-1", expiresAfterEnd(10*24*time.Hour))},
			want:   []string{"GroupMetricsServerCertificateControllerNoLeader", "GroupMetricsServerCertificateExpiring{pod=gms-1}"},
		},
		{
			name:   "the served certificate expires in a day, while a leader syncs",
			series: []string{serverUp, serving("gms-1", expiresAfterEnd(24*time.Hour)), leaderLeads, leaderSyncs},
			want:   []string{"GroupMetricsServerCertificateExpiringSoon{pod=gms-1}", "GroupMetricsServerCertificateExpiring{pod=gms-1}"},
		},
		{
			name: "one replica still serves the old certificate",
			series: []string{serverUp, servingYear, leaderLeads, leaderSyncs,
				`up{job="group-metrics-server", pod="gms-2"} 1x240`, serving("gms-2", expiresAfterEnd(5*24*time.Hour))},
			want: []string{"GroupMetricsServerCertificateExpiring{pod=gms-2}"},
		},
		// The read limit's refusals, beside healthy certificates: any
		// reader's for 15 minutes warns; the HPA's own for 5 is critical.
		{
			name: "other readers refused for an hour",
			series: []string{serverUp, servingYear, leaderLeads, leaderSyncs,
				`group_metrics_server_api_reads_rejected_total{pod="gms-1", reader="other"} 0x180 0+10x60`},
			want: []string{"GroupMetricsServerReadsRefused"},
		},
		{
			name: "the HPA's reads refused for ten minutes",
			series: []string{serverUp, servingYear, leaderLeads, leaderSyncs,
				`group_metrics_server_api_reads_rejected_total{pod="gms-1", reader="priority"} 0x230 0+1x10`},
			want: []string{"GroupMetricsServerHPAReadsRefused"},
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

// expiresAfterEnd is a constant Unix time d after the last evaluation.
func expiresAfterEnd(d time.Duration) string {
	return strconv.FormatInt(int64((evalEnd+d)/time.Second), 10) + "x240"
}
