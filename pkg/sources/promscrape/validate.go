package promscrape

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// maxTimeout keeps one target from holding a scrape tick for long.
const maxTimeout = time.Minute

// Highest accepted limits: past them a limit no longer protects the server.
// expfmt's time grows with the square of a line's labels: 4 MiB of 8 KiB
// lines took it 0.55 s at 64 labels a line, 1.1 s at 128, 4.6 s at 256 and
// 21 s at 512 (on the loaded 2-core CI box), so 128 is the most a line may
// be allowed.
const (
	maxLabelsPerSeries     = 128
	maxSeriesPerTarget     = 1_000_000
	maxPointsPerCollection = 10_000_000
)

// Validate checks the configuration and returns every error found. It also
// compiles the selectors and regular expressions and fills the limits left
// at zero, so call it (or Parse) before using c.
func (c *Config) Validate() []error {
	var errs []error
	if len(c.Metrics) == 0 {
		errs = append(errs, fmt.Errorf("metrics: no metric configured (set metrics or presets)"))
	}
	served := map[string]int{}
	for i := range c.Metrics {
		errs = append(errs, c.Metrics[i].validate(fmt.Sprintf("metrics[%d]", i))...)
		if j, dup := served[c.Metrics[i].Name]; dup && c.Metrics[i].Name != "" {
			errs = append(errs, fmt.Errorf("metrics[%d].name: %q is already served by metrics[%d]", i, c.Metrics[i].Name, j))
		} else {
			served[c.Metrics[i].Name] = i
		}
	}
	if c.Timeout.Duration <= 0 || c.Timeout.Duration > maxTimeout {
		errs = append(errs, fmt.Errorf("timeout: %s must be above 0 and at most %s", c.Timeout.Duration, maxTimeout))
	}
	if c.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("maxBytes: %d must be above 0", c.MaxBytes))
	}
	c.Limits.complete()
	errs = append(errs, c.Limits.validate()...)
	errs = append(errs, c.Pods.validate()...)
	names := map[string]string{}
	name := func(path, n string) {
		if first, ok := names[n]; ok {
			errs = append(errs, fmt.Errorf("%s.name: %q is used by %s too", path, n, first))
		}
		names[n] = path
	}
	for i := range c.NodeExporters {
		path := fmt.Sprintf("nodeExporters[%d]", i)
		errs = append(errs, c.NodeExporters[i].validate(path, served)...)
		name(path, c.NodeExporters[i].Name)
	}
	for i := range c.EndpointPickers {
		path := fmt.Sprintf("endpointPickers[%d]", i)
		errs = append(errs, c.EndpointPickers[i].validate(path, served)...)
		name(path, c.EndpointPickers[i].Name)
	}
	return errs
}

func (m *Metric) validate(path string) []error {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(m.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("%s.name: %q is not a valid custom metric name: %s", path, m.Name, strings.Join(msgs, "; ")))
	}
	for j, s := range append([]string{m.Series}, m.Aliases...) {
		field := path + ".series"
		if j > 0 {
			field = fmt.Sprintf("%s.aliases[%d]", path, j-1)
		}
		if !model.LegacyValidation.IsValidMetricName(s) {
			errs = append(errs, fmt.Errorf("%s: %q is not a Prometheus metric name", field, s))
		}
	}
	switch m.Type {
	case Gauge, Counter:
		if m.Quantile != nil {
			errs = append(errs, fmt.Errorf("%s.quantile: only a histogram has quantiles", path))
		}
	case Histogram, Ratio:
		errs = append(errs, m.validateHistogram(path)...)
	default:
		errs = append(errs, fmt.Errorf("%s.type: %q must be gauge, counter, histogram or ratio", path, m.Type))
	}
	switch m.Idle {
	case "", IdleZero, IdleNone:
		if m.Idle != "" && m.Type != Histogram && m.Type != Ratio {
			errs = append(errs, fmt.Errorf("%s.idle: only a histogram or a ratio has an idle value", path))
		}
	default:
		errs = append(errs, fmt.Errorf("%s.idle: %q must be zero or none", path, m.Idle))
	}
	switch {
	case m.Type == Ratio && !model.LegacyValidation.IsValidMetricName(m.Denominator):
		errs = append(errs, fmt.Errorf("%s.denominator: %q is not a Prometheus metric name", path, m.Denominator))
	case m.Type != Ratio && m.Denominator != "":
		errs = append(errs, fmt.Errorf("%s.denominator: only a ratio has a denominator", path))
	}
	if sc, err := group.ParseScope(string(m.Members)); err != nil {
		errs = append(errs, fmt.Errorf("%s.members: %w", path, err))
	} else {
		m.Members = sc
	}
	switch {
	case m.Type == Histogram, m.Type == Ratio:
	case m.Combine == CombineSum, m.Combine == CombineMean, m.Combine == CombineMax:
	default:
		errs = append(errs, fmt.Errorf("%s.combine: %q must be sum, mean or max", path, m.Combine))
	}
	for j := range m.Matchers {
		if err := m.Matchers[j].compile(); err != nil {
			errs = append(errs, fmt.Errorf("%s.matchers[%d]: %w", path, j, err))
		}
	}
	for _, b := range []struct {
		field string
		v     *float64
	}{{"min", m.Min}, {"max", m.Max}} {
		if b.v != nil && (math.IsNaN(*b.v) || math.IsInf(*b.v, 0)) {
			errs = append(errs, fmt.Errorf("%s.%s: %v must be finite", path, b.field, *b.v))
		}
	}
	if m.Min != nil && m.Max != nil && *m.Min > *m.Max {
		errs = append(errs, fmt.Errorf("%s: min %v is above max %v", path, *m.Min, *m.Max))
	}
	return errs
}

// inRange reports whether v is within the metric's bounds.
func (m *Metric) inRange(v float64) bool {
	return (m.Min == nil || v >= *m.Min) && (m.Max == nil || v <= *m.Max)
}

func (l *Limits) validate() []error {
	var errs []error
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"labelsPerSeries", l.LabelsPerSeries, maxLabelsPerSeries},
		{"labelBytesPerSeries", l.LabelBytesPerSeries, maxLineBytes},
		{"seriesPerTarget", l.SeriesPerTarget, maxSeriesPerTarget},
		{"pointsPerCollection", l.PointsPerCollection, maxPointsPerCollection},
	} {
		if f.v <= 0 || f.v > f.max {
			errs = append(errs, fmt.Errorf("limits.%s: %d must be above 0 and at most %d", f.name, f.v, f.max))
		}
	}
	return errs
}

func (mt *Matcher) compile() error {
	if !model.LegacyValidation.IsValidLabelName(mt.Label) {
		return fmt.Errorf("label %q is not a Prometheus label name", mt.Label)
	}
	switch mt.Op {
	case MatchEqual, MatchNotEqual:
	case MatchRegexp, MatchNotRegexp:
		re, err := regexp.Compile("^(?:" + mt.Value + ")$")
		if err != nil {
			return fmt.Errorf("value %q: %w", mt.Value, err)
		}
		mt.re = re
	default:
		return fmt.Errorf("op %q must be one of =, !=, =~, !~", mt.Op)
	}
	return nil
}

// matches reports whether value (the label's value, "" when absent) passes.
func (mt *Matcher) matches(value string) bool {
	switch mt.Op {
	case MatchEqual:
		return value == mt.Value
	case MatchNotEqual:
		return value != mt.Value
	case MatchRegexp:
		return mt.re.MatchString(value)
	default:
		return !mt.re.MatchString(value)
	}
}

func (p *PodTargets) validate() []error {
	var errs []error
	p.selector = labels.Nothing()
	if p.Selector != "" {
		sel, err := labels.Parse(p.Selector)
		if err != nil {
			errs = append(errs, fmt.Errorf("pods.selector: %w", err))
		} else {
			p.selector = sel
		}
		if p.Port == 0 {
			errs = append(errs, fmt.Errorf("pods.port: required with pods.selector"))
		}
	}
	if p.Port != 0 && !validPort(p.Port) {
		errs = append(errs, fmt.Errorf("pods.port: %d is not a port", p.Port))
	}
	return errs
}

func (e *NodeExporter) validate(path string, served map[string]int) []error {
	errs := e.TrustedTarget.validate(path, served)
	for _, l := range []string{e.NamespaceLabel, e.PodLabel, e.ContainerLabel} {
		if !model.LegacyValidation.IsValidLabelName(l) {
			errs = append(errs, fmt.Errorf("%s: attribution label %q is not a Prometheus label name", path, l))
		}
	}
	return errs
}

func (p *EndpointPicker) validate(path string, served map[string]int) []error {
	errs := p.TrustedTarget.validate(path, served)
	if msgs := validation.IsDNS1123Subdomain(p.InferencePool); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("%s.inferencePool: %q is not an object name: %s", path, p.InferencePool, strings.Join(msgs, "; ")))
	}
	if p.TokenFile != "" && !filepath.IsAbs(p.TokenFile) {
		errs = append(errs, fmt.Errorf("%s.tokenFile: %q must be an absolute path", path, p.TokenFile))
	}
	return errs
}

func (t *TrustedTarget) validate(path string, served map[string]int) []error {
	var errs []error
	if msgs := validation.IsDNS1123Label(t.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("%s.name: %q: %s", path, t.Name, strings.Join(msgs, "; ")))
	}
	sel, err := labels.Parse(t.Selector)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("%s.selector: %w", path, err))
	case sel.Empty():
		errs = append(errs, fmt.Errorf("%s.selector: required, or every pod would be taken for this target", path))
	default:
		t.selector = sel
	}
	if !validPort(t.Port) {
		errs = append(errs, fmt.Errorf("%s.port: %d is not a port", path, t.Port))
	}
	if !strings.HasPrefix(t.Path, "/") {
		errs = append(errs, fmt.Errorf("%s.path: %q must begin with /", path, t.Path))
	}
	if t.Scheme != "http" && t.Scheme != "https" {
		errs = append(errs, fmt.Errorf("%s.scheme: %q must be http or https", path, t.Scheme))
	}
	if len(t.Namespaces) == 0 {
		errs = append(errs, fmt.Errorf("%s.namespaces: required: the namespaces the target's pods run in", path))
	}
	for j, ns := range t.Namespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.namespaces[%d]: %q is not a namespace name: %s", path, j, ns, strings.Join(msgs, "; ")))
		}
	}
	for j, sa := range t.ServiceAccounts {
		if msgs := validation.IsDNS1123Subdomain(sa); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.serviceAccounts[%d]: %q is not a service account name: %s", path, j, sa, strings.Join(msgs, "; ")))
		}
	}
	if len(t.Metrics) == 0 {
		errs = append(errs, fmt.Errorf("%s.metrics: required: the served metrics the target may supply", path))
	}
	t.metrics = map[int]bool{}
	for j, name := range t.Metrics {
		i, ok := served[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s.metrics[%d]: %q is not a configured metric", path, j, name))
			continue
		}
		t.metrics[i] = true
	}
	return errs
}

func validPort(p int) bool { return p > 0 && p < 65536 }

func presetNames() string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// validateHistogram checks what a histogram or a ratio takes and refuses
// what it does not: a combine rule (its parts are added up) and bounds on a
// value; a ratio has no quantile.
func (m *Metric) validateHistogram(path string) []error {
	var errs []error
	if m.Combine != "" {
		errs = append(errs, fmt.Errorf("%s.combine: a %s takes none: its parts are added up over series and members", path, m.Type))
	}
	if m.Min != nil || m.Max != nil {
		errs = append(errs, fmt.Errorf("%s: a %s takes no min or max", path, m.Type))
	}
	switch q := m.Quantile; {
	case q != nil && m.Type == Ratio:
		errs = append(errs, fmt.Errorf("%s.quantile: only a histogram has quantiles", path))
	case q != nil && (math.IsNaN(*q) || *q < 0 || *q > 1):
		errs = append(errs, fmt.Errorf("%s.quantile: %v is not within [0, 1]", path, *q))
	}
	return errs
}
