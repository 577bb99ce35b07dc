package promscrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// Sample is one series of an allow-listed family, attributed to a pod.
type Sample struct {
	// Metric indexes Config.Metrics.
	Metric    int
	Namespace string
	Pod       string
	// Container is "" when the series names no container.
	Container string
	// Series identifies the series within its target (its sorted labels),
	// so a counter's points can be matched from one scrape to the next.
	Series string
	Value  float64
	// Timestamp is the scrape time; the exposition's own timestamp is
	// ignored (see sampleOf).
	Timestamp time.Time
}

// allowed maps an exposed family name to the metrics that read it.
type allowed map[string][]allowEntry

type allowEntry struct {
	metric int
	alias  bool
	// part marks the names of a histogram's sample lines (_bucket, _sum,
	// _count): they let those lines through the line filter, and are
	// never read as families of their own.
	part bool
	// ratio marks a ratio's families: its numerator (Series) and, with
	// denominator, the counter that divides it.
	ratio, denominator bool
}

// only is the part of a that the metrics of keep read.
func (a allowed) only(keep map[int]bool) allowed {
	out := allowed{}
	for name, es := range a {
		for _, e := range es {
			if keep[e.metric] {
				out[name] = append(out[name], e)
			}
		}
	}
	return out
}

func (c *Config) allowList() allowed {
	a := allowed{}
	for i, m := range c.Metrics {
		if m.Type == Ratio {
			a[m.Denominator] = append(a[m.Denominator], allowEntry{metric: i, ratio: true, denominator: true})
		}
		for j, s := range append([]string{m.Series}, m.Aliases...) {
			a[s] = append(a[s], allowEntry{metric: i, alias: j > 0, ratio: m.Type == Ratio})
			if m.Type != Histogram {
				continue
			}
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				a[s+suffix] = append(a[s+suffix], allowEntry{metric: i, alias: j > 0, part: true})
			}
		}
	}
	return a
}

// ctxCheckEvery is how many lines (or series) pass between two looks at the
// scrape's context while decoding.
const ctxCheckEvery = 1024

// filterLines keeps only the lines of a text exposition that can belong to
// an allow-listed family: its samples and its # TYPE and # HELP lines. Every
// other line (other families, comments, blank lines) is dropped before
// parsing, so other families are never stored. A line whose name it cannot
// read simply (a quoted name with an escape) is kept and left to the parser,
// so the filter never drops what the parser would have attributed to an
// allowed family; FuzzFilterMatchesFullParse checks that against a parse of
// the whole body.
//
// A sample line with labels but no metric name ({a="b"} 1) is always
// dropped: the format requires a name, and expfmt v0.70.0 appends such a
// line's labels to the series read before it, whichever family that series
// is in, and lists that series a second time (found by
// FuzzFilterMatchesFullParse). nameless counts those lines that follow an
// allow-listed family's line, so decode can report them.
//
// The kept sample lines are held to lim before the parser sees them: their
// labels (counted by countLabels, one pass over the line), the bytes between
// their braces, and their number. expfmt's time grows with the square of a
// line's labels, so a line past the label cap must never reach it. A body
// past a cap fails the target (too_large). ctx is looked at every
// ctxCheckEvery lines; once it is done the target fails (timeout).
func filterLines(ctx context.Context, body []byte, allow allowed, lim lineLimits) (kept []byte, nameless int, err error) {
	out := make([]byte, 0, 4096)
	// familyKept is whether the last line that named a family named an
	// allow-listed one.
	familyKept := false
	series := 0
	for n := 0; len(body) > 0; n++ {
		if n%ctxCheckEvery == 0 && ctx.Err() != nil {
			return nil, 0, errDecodeStopped(ctx)
		}
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			body = nil
		}
		switch classify(line, allow) {
		case lineTheirs:
			familyKept = false
		case lineNameless:
			if familyKept {
				nameless++
			}
		case lineOurs:
			familyKept = true
			if len(line) > maxLineBytes {
				return nil, 0, sources.WithReason(sources.ReasonTooLarge, fmt.Errorf("a line of an allow-listed family is longer than %d bytes", maxLineBytes))
			}
			if err := checkSeriesLine(line, lim, &series); err != nil {
				return nil, 0, sources.WithReason(sources.ReasonTooLarge, err)
			}
			out = append(out, line...)
			if line[len(line)-1] != '\n' {
				out = append(out, '\n')
			}
		}
	}
	return out, nameless, nil
}

// maxLineBytes bounds a kept line. expfmt's time grows with the square of
// a line's labels (docs/benchmarks.md, "ukpd decoding": 8,000 labels take it
// 4 s), and a real engine's or exporter's line is a few hundred bytes; 8 KiB
// holds no more than about 1,600 labels, which limits.labelsPerSeries cuts
// to 64 by default.
const maxLineBytes = 8 << 10

// lineKind is what filterLines makes of one line.
type lineKind uint8

const (
	// lineOther is a blank line or a comment other than # TYPE and # HELP.
	lineOther lineKind = iota
	// lineOurs is a sample, # TYPE or # HELP line of an allow-listed family.
	lineOurs
	// lineTheirs names a family that is not allow-listed.
	lineTheirs
	// lineNameless is a sample line with labels and no metric name.
	lineNameless
)

func classify(line []byte, allow allowed) lineKind {
	s := bytes.TrimLeft(line, " \t")
	if len(s) == 0 || s[0] == '\n' || s[0] == '\r' {
		return lineOther
	}
	var name []byte
	switch s[0] {
	case '#':
		f := bytes.Fields(s[1:])
		if len(f) < 2 || (string(f[0]) != "TYPE" && string(f[0]) != "HELP") {
			return lineOther
		}
		if f[1][0] == '"' {
			return lineOurs
		}
		name = f[1][:sources.MetricNameLen(f[1])]
	case '{':
		var ok bool
		if name, ok = quotedName(s[1:]); !ok {
			return lineNameless
		}
		if bytes.IndexByte(name, '\\') >= 0 {
			return lineOurs
		}
	default:
		name = s[:sources.MetricNameLen(s)]
	}
	if _, ok := allow[string(name)]; ok {
		return lineOurs
	}
	return lineTheirs
}

// quotedName reads the quoted metric name that opens the labels of a line
// in the form {"name",...}, up to its first quote after the opening one
// (so a name with an escape comes back holding a backslash); false when the
// labels open with no quoted name, or with a quoted label name ({"a"="b"}).
func quotedName(s []byte) ([]byte, bool) {
	s = bytes.TrimLeft(s, " \t")
	if len(s) == 0 || s[0] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(s[1:], '"')
	if end < 0 {
		return nil, false
	}
	name, rest := s[1:1+end], bytes.TrimLeft(s[2+end:], " \t")
	if bytes.IndexByte(name, '\\') < 0 && len(rest) > 0 && rest[0] == '=' {
		return nil, false
	}
	return name, true
}

// parseFamilies parses a text exposition with expfmt after filtering it to
// the allow-listed families, and returns those families only, with the
// count of nameless sample lines filterLines dropped among them.
func parseFamilies(ctx context.Context, body []byte, allow allowed, lim lineLimits) (fams map[string]*dto.MetricFamily, nameless int, err error) {
	// The parser reads bytes from the network; a panic in it must fail
	// this target, not the server.
	defer func() {
		if r := recover(); r != nil {
			fams, nameless, err = nil, 0, fmt.Errorf("text parser panicked: %v", r)
		}
	}()
	kept, nameless, err := filterLines(ctx, body, allow, lim)
	if err != nil {
		return nil, 0, err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err = p.TextToMetricFamilies(bytes.NewReader(kept))
	if err != nil {
		return nil, 0, err
	}
	for name := range fams {
		if _, ok := allow[name]; !ok {
			delete(fams, name)
		}
	}
	return fams, nameless, nil
}

// attribution says how a target's series name their pod: a pod target's
// are its own, a picker's its pool's (under sources.ObjectKey), an
// exporter's name theirs by labels.
type attribution struct {
	namespace, pod                      string
	namespaceLabel, podLabel, contLabel string
}

func (t *Target) attribution() attribution {
	switch {
	case t.Pod != nil:
		return attribution{namespace: t.Pod.Namespace, pod: t.Pod.Name, contLabel: "container"}
	case t.Picker != nil:
		return attribution{namespace: t.Namespace, pod: sources.ObjectKey(sources.InferencePools, t.Picker.InferencePool)}
	}
	e := t.Exporter
	return attribution{namespaceLabel: e.NamespaceLabel, podLabel: e.PodLabel, contLabel: e.ContainerLabel}
}

// errSkipped collects what a decode left out without failing.
var errSkipped = errors.New("series left out")

// decode turns a target's body into samples of allow-listed families (for
// an exporter, of its own metrics only). It fails when the body does not
// parse (ReasonDecode at the caller), passes a limit (too_large) or
// outlasts ctx (timeout, looked at between families and every
// ctxCheckEvery series); a family of the wrong type or a series an
// exporter does not attribute is left out and reported in the returned
// partial error.
func (c *Config) decode(ctx context.Context, body []byte, t *Target, allow allowed, now time.Time) ([]Sample, error) {
	switch {
	case t.Exporter != nil:
		allow = allow.only(t.Exporter.metrics)
	case t.Picker != nil:
		allow = allow.only(t.Picker.metrics)
	}
	fams, nameless, err := parseFamilies(ctx, body, allow, c.Limits.lines())
	if err != nil {
		return nil, err
	}
	attr := t.attribution()
	hasPrimary := map[int]bool{}
	for name := range fams {
		for _, e := range allow[name] {
			if !e.alias && !e.part && !e.denominator && len(fams[name].Metric) > 0 {
				hasPrimary[e.metric] = true
			}
		}
	}
	names := make([]string, 0, len(fams))
	for name := range fams {
		names = append(names, name)
	}
	sort.Strings(names)
	var (
		out      []Sample
		problems []string
	)
	if nameless > 0 {
		problems = append(problems, fmt.Sprintf("sample lines naming no metric: %d", nameless))
	}
	for _, name := range names {
		fam := fams[name]
		for _, e := range allow[name] {
			if e.part || (e.alias && hasPrimary[e.metric]) {
				continue
			}
			m := &c.Metrics[e.metric]
			if !typeAccepts(m.Type, fam.GetType()) {
				problems = append(problems, fmt.Sprintf("%s is a %s, configured as %s (%s)", name, strings.ToLower(fam.GetType().String()), m.Type, m.Name))
				continue
			}
			if ctx.Err() != nil {
				return nil, errDecodeStopped(ctx)
			}
			for k, pm := range fam.Metric {
				if k%ctxCheckEvery == ctxCheckEvery-1 && ctx.Err() != nil {
					return nil, errDecodeStopped(ctx)
				}
				for _, s := range samplesOf(m, pm, attr, now) {
					if e.ratio {
						s.Series = ratioPart(s.Series, e.denominator)
					}
					s.Metric = e.metric
					out = append(out, s)
				}
			}
		}
	}
	if len(problems) > 0 {
		return out, fmt.Errorf("%w: %s", errSkipped, strings.Join(problems, "; "))
	}
	return out, nil
}

func typeAccepts(t Type, ft dto.MetricType) bool {
	switch ft {
	case dto.MetricType_UNTYPED:
		return t != Histogram
	case dto.MetricType_HISTOGRAM:
		return t == Histogram
	case dto.MetricType_GAUGE:
		return t == Gauge
	case dto.MetricType_COUNTER:
		return t == Counter || t == Ratio
	}
	return false
}

// ratioPart marks a ratio's series as a histogram's _sum (the numerator) or
// _count (the denominator): the store keeps their rates as it keeps a
// histogram's, and the ratio is served as the mean of those parts, pooled
// over series, members and groups. The part label sorts before every
// exposed label (it begins with "__"), so the key stays sorted.
func ratioPart(series string, denominator bool) string {
	part := sources.PartSum
	if denominator {
		part = sources.PartCount
	}
	return sources.LabelHistogramPart + "=" + part + "\x00" + series
}

// samplesOf reads one series: its one sample, or a histogram's parts, each
// a series of its own (histogramSamples); none when the matchers reject it
// or an exporter's series names no pod.
func samplesOf(m *Metric, pm *dto.Metric, attr attribution, now time.Time) []Sample {
	if m.Type != Histogram {
		if s, ok := sampleOf(m, pm, attr, now); ok {
			return []Sample{s}
		}
		return nil
	}
	return histogramSamples(m, pm, attr, now)
}

// sampleOf reads one series; false when the matchers reject it or an
// exporter's series names no pod.
func sampleOf(m *Metric, pm *dto.Metric, attr attribution, now time.Time) (Sample, bool) {
	s, ok := attributed(m, pm, attr)
	if !ok {
		return Sample{}, false
	}
	s.Series = seriesKey(pm)
	switch {
	case pm.Gauge != nil:
		s.Value = pm.Gauge.GetValue()
	case pm.Counter != nil:
		s.Value = pm.Counter.GetValue()
	case pm.Untyped != nil:
		s.Value = pm.Untyped.GetValue()
	default:
		return Sample{}, false
	}
	if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
		return Sample{}, false
	}
	// The exposition's own timestamp is ignored: the tenant's clock (or
	// a value it chose) must not make a sample look fresher or staler than
	// the scrape that read it, nor move a counter's rate.
	s.Timestamp = now
	return s, true
}

// attributed is a sample of pm, credited to its pod and container, with no
// value yet; false when the matchers reject it or an exporter's series
// names no pod.
func attributed(m *Metric, pm *dto.Metric, attr attribution) (Sample, bool) {
	get := func(name string) string {
		for _, l := range pm.Label {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for i := range m.Matchers {
		if !m.Matchers[i].matches(get(m.Matchers[i].Label)) {
			return Sample{}, false
		}
	}
	var s Sample
	if attr.pod != "" {
		s.Namespace, s.Pod = attr.namespace, attr.pod
	} else {
		s.Namespace, s.Pod = get(attr.namespaceLabel), get(attr.podLabel)
		if s.Namespace == "" || s.Pod == "" {
			return Sample{}, false
		}
	}
	s.Container = get(attr.contLabel)
	return s, true
}

// histogramSamples reads a histogram's parts as series of their own, each
// a counter whose rate the store serves: one per bucket (its series key
// adds sources.LabelLE, the bucket's bound), its _sum and its _count, each
// marked by sources.LabelHistogramPart. A part whose value is not finite is
// left out.
func histogramSamples(m *Metric, pm *dto.Metric, attr attribution, now time.Time) []Sample {
	h := pm.GetHistogram()
	base, ok := attributed(m, pm, attr)
	if !ok || h == nil {
		return nil
	}
	count := h.GetSampleCountFloat()
	if count == 0 {
		count = float64(h.GetSampleCount())
	}
	parts := make([]Sample, 0, len(h.GetBucket())+2)
	add := func(v float64, extra ...*dto.LabelPair) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		s := base
		s.Series, s.Value, s.Timestamp = seriesKey(&dto.Metric{Label: sortedLabels(pm.Label, extra)}), v, now
		parts = append(parts, s)
	}
	pair := func(name, value string) *dto.LabelPair { return &dto.LabelPair{Name: &name, Value: &value} }
	for _, b := range h.GetBucket() {
		v := b.GetCumulativeCountFloat()
		if v == 0 {
			v = float64(b.GetCumulativeCount())
		}
		add(v, pair(sources.LabelHistogramPart, sources.PartBucket), pair(sources.LabelLE, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
	}
	add(h.GetSampleSum(), pair(sources.LabelHistogramPart, sources.PartSum))
	add(count, pair(sources.LabelHistogramPart, sources.PartCount))
	return parts
}

// sortedLabels is labels and extra, sorted by name.
func sortedLabels(labels, extra []*dto.LabelPair) []*dto.LabelPair {
	out := append(append(make([]*dto.LabelPair, 0, len(labels)+len(extra)), labels...), extra...)
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// seriesKey is the series' labels in the order expfmt sorts them.
func seriesKey(pm *dto.Metric) string {
	var b strings.Builder
	for _, l := range pm.Label {
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(l.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}
