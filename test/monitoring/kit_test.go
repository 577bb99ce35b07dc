package monitoring

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const kit = "../../manifests/components/monitoring"

// external are the names the kit reads from other exporters, each with
// where it comes from; they are not in the server's /metrics.
var external = map[string]string{
	"up":                                "Prometheus, per scrape target",
	"aggregator_unavailable_apiservice": "kube-apiserver (kube-aggregator's availability controller)",
	// The certificate controller's /metrics, from client-go's leader
	// election (k8s.io/component-base/metrics/prometheus/clientgo/leaderelection);
	// cmd/group-metrics-server/app/options checks it is there.
	"leader_election_master_status": "client-go leader election, on the certificate controller's /metrics",
}

// ruleFile reads the PrometheusRule's spec (a Prometheus rule file: groups)
// and parses it as Prometheus does.
func ruleFile(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	var cr struct {
		Kind string    `yaml:"kind"`
		Spec yaml.Node `yaml:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(kit, "prometheusrule.yaml"))
	if err == nil {
		err = yaml.Unmarshal(b, &cr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if cr.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml holds a %q", cr.Kind)
	}
	spec, err := yaml.Marshal(&cr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rule file: %v", err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatal("no rule group")
	}
	return groups
}

// expressions returns every PromQL expression of the kit, keyed by where
// it is.
func expressions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range ruleFile(t).Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	var d struct {
		Panels []struct {
			Title, Type string
			Targets     []struct{ Expr string }
		}
	}
	b, err := os.ReadFile(filepath.Join(kit, "dashboard.json"))
	if err == nil {
		err = json.Unmarshal(b, &d)
	}
	if err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q runs no query", p.Title)
		}
		for i, tg := range p.Targets {
			out["panel "+p.Title+" #"+string(rune('A'+i))] = grafanaVars(tg.Expr)
		}
	}
	return out
}

// grafanaVars replaces the dashboard's variables with values PromQL parses.
func grafanaVars(expr string) string {
	return strings.NewReplacer("$namespace", ".*", "$__rate_interval", "5m").Replace(expr)
}

// family maps a histogram's or summary's series name to its family.
func family(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok {
			return base
		}
	}
	return name
}

// names returns the metric families expr selects.
func names(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				out = append(out, "<selector without a name: "+vs.String()+">")
			} else {
				out = append(out, family(vs.Name))
			}
		}
		return nil
	})
	return out, nil
}

// TestKitMetricNames parses every expression and checks that the names the
// kit uses are exactly those of metric-names.txt (which the main module's
// tests find on /metrics), or a documented external one.
func TestKitMetricNames(t *testing.T) {
	used, exprs := map[string][]string{}, expressions(t)
	for where, expr := range exprs {
		ns, err := names(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			continue
		}
		if len(ns) == 0 {
			t.Errorf("%s selects no metric: %s", where, expr)
		}
		for _, n := range ns {
			used[n] = append(used[n], where)
		}
	}
	got := slices.DeleteFunc(slices.Sorted(maps.Keys(used)), func(n string) bool { return external[n] != "" })
	b, err := os.ReadFile(filepath.Join(kit, "metric-names.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			listed = append(listed, l)
		}
	}
	if !slices.IsSorted(listed) {
		t.Error("metric-names.txt is not sorted")
	}
	if diff := cmp.Diff(listed, got); diff != "" {
		t.Errorf("metric-names.txt (-listed +used by the kit):\n%s\nthe kit uses:\n%s", diff, strings.Join(got, "\n"))
	}
	for n := range external {
		if _, ok := used[n]; !ok {
			t.Errorf("external metric %s is no longer used: drop it from the list", n)
		}
	}
	t.Logf("%d expressions, %d metric families of the server and controller, %d external", len(exprs), len(got), len(external))
}

// TestRulesComplete checks what operators rely on: every alert has a
// severity, a summary, and a runbook in docs/operations.md.
func TestRulesComplete(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range ruleFile(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], "https://github.com/group-metrics-server/group-metrics-server/blob/main/docs/operations.md#")
			if !ok {
				t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
				continue
			}
			if !strings.Contains(strings.ToLower(string(doc)), "### "+anchor) {
				t.Errorf("%s: docs/operations.md has no section ### %s", r.Alert, anchor)
			}
		}
	}
}
