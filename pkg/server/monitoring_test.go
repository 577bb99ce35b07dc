package server

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kitNames reads the metric families the monitoring kit uses
// (manifests/components/monitoring/metric-names.txt; test/monitoring checks
// that the kit's rules and panels use exactly these).
func kitNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../manifests/components/monitoring/metric-names.txt")
	must(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatal("metric-names.txt lists no name")
	}
	return out
}

// TestMonitoringKitMetricsServed scrapes the authorized /metrics of a
// running server (with --group-metrics-series and an LWS group) after a few
// reads, and checks that every family the monitoring kit's alerts and
// dashboard use is there; the certificate controller's families are checked
// in pkg/certs, on its registry.
func TestMonitoringKitMetricsServed(t *testing.T) {
	env := startServer(t, "")
	ctx := context.Background()
	mc := metricsClient(t, env.admin, "application/json")
	// Reads observe the served-age histograms and the request metrics.
	if _, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	code, body := env.get(t, env.admin, "/metrics", "text/plain")
	if code != 200 {
		t.Fatalf("GET /metrics = %d\n%.2000s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	checked := 0
	for _, name := range kitNames(t) {
		if strings.HasPrefix(name, "group_metrics_server_certs_") {
			continue
		}
		checked++
		mf, ok := families[name]
		if !ok || len(mf.GetMetric()) == 0 {
			t.Errorf("the monitoring kit uses %s, which /metrics does not serve", name)
		}
	}
	t.Logf("%d families of the kit served, of %d on /metrics", checked, len(families))
}
