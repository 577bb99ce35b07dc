package env

import (
	"fmt"
	"iter"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PromValue sums the samples of the metric name in a Prometheus text
// exposition whose labels include every one of labels (`key="value"`), and
// reports whether there was any. A histogram or summary counts its _sum
// and _count as samples of their own names.
func PromValue(body, name string, labels ...string) (float64, bool, error) {
	want := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return 0, false, fmt.Errorf("label matcher %q is not key=\"value\"", l)
		}
		unquoted, err := strconv.Unquote(v)
		if err != nil {
			return 0, false, fmt.Errorf("label matcher %q: %w", l, err)
		}
		want[k] = unquoted
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return 0, false, fmt.Errorf("parse /metrics: %w", err)
	}
	var sum float64
	found := false
	for family, m := range metricSamples(families) {
		if family != name || !hasLabels(m.labels, want) {
			continue
		}
		sum += m.value
		found = true
	}
	return sum, found, nil
}

type promSample struct {
	labels map[string]string
	value  float64
}

// metricSamples yields every sample by the name it has in the text.
func metricSamples(families map[string]*dto.MetricFamily) iter.Seq2[string, promSample] {
	return func(yield func(string, promSample) bool) {
		for name, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				var samples map[string]float64
				switch {
				case m.GetHistogram() != nil:
					samples = map[string]float64{name + "_sum": m.GetHistogram().GetSampleSum(), name + "_count": float64(m.GetHistogram().GetSampleCount())}
				case m.GetSummary() != nil:
					samples = map[string]float64{name + "_sum": m.GetSummary().GetSampleSum(), name + "_count": float64(m.GetSummary().GetSampleCount())}
				case m.GetCounter() != nil:
					samples = map[string]float64{name: m.GetCounter().GetValue()}
				case m.GetGauge() != nil:
					samples = map[string]float64{name: m.GetGauge().GetValue()}
				default:
					samples = map[string]float64{name: m.GetUntyped().GetValue()}
				}
				for n, v := range samples {
					if !yield(n, promSample{labels: labels, value: v}) {
						return
					}
				}
			}
		}
	}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
