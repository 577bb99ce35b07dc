package monitoring

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// sampleInterval is the time between two values of a loaded series, the
// gap of a promqltest "load 1m" block.
const sampleInterval = time.Minute

// load reads series in promqltest's series notation
// (`name{label="value"} 0+60x240`, the value at the Unix epoch first, one
// every sampleInterval, `_` for none) and returns a Queryable that holds
// them and nothing else.
func load(t *testing.T, series ...string) storage.Queryable {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	all := make([]storage.Series, 0, len(series))
	for _, desc := range series {
		lset, values, err := p.ParseSeriesDesc(desc)
		if err != nil {
			t.Fatalf("series %q: %v", desc, err)
		}
		s := promql.Series{Metric: lset}
		for i, v := range values {
			if v.Histogram != nil {
				t.Fatalf("series %q: histogram values are not loaded here", desc)
			}
			if !v.Omitted {
				s.Floats = append(s.Floats, promql.FPoint{T: int64(i) * sampleInterval.Milliseconds(), F: v.Value})
			}
		}
		all = append(all, promql.NewStorageSeries(s))
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	for i := 1; i < len(all); i++ {
		if labels.Equal(all[i-1].Labels(), all[i].Labels()) {
			t.Fatalf("series %s loaded twice", all[i].Labels())
		}
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		// Every sample of each matching series (in label order, so the set
		// is sorted), whatever the hints ask: the engine keeps those of the
		// range it evaluates. A label a series lacks has the empty value, as
		// in a selector.
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
			var selected []storage.Series
			for _, s := range all {
				if !slices.ContainsFunc(matchers, func(m *labels.Matcher) bool { return !m.Matches(s.Labels().Get(m.Name)) }) {
					selected = append(selected, s)
				}
			}
			return &seriesSet{series: selected, next: -1}
		},
	}}
}

// seriesSet is a SeriesSet over a slice, in the slice's order.
type seriesSet struct {
	series []storage.Series
	next   int
}

func (s *seriesSet) Next() bool {
	if s.next < len(s.series) {
		s.next++
	}
	return s.next < len(s.series)
}

func (s *seriesSet) At() storage.Series              { return s.series[s.next] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }
