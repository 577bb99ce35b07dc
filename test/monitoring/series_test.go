package monitoring

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
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
		samples := make([]chunks.Sample, 0, len(values))
		for i, v := range values {
			if v.Histogram != nil {
				t.Fatalf("series %q: histogram values are not loaded here", desc)
			}
			if v.Omitted {
				continue
			}
			samples = append(samples, floatSample{t: int64(i) * sampleInterval.Milliseconds(), f: v.Value})
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	for i := 1; i < len(all); i++ {
		if labels.Equal(all[i-1].Labels(), all[i].Labels()) {
			t.Fatalf("series %s loaded twice", all[i].Labels())
		}
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		// Every sample of each matching series, whatever the hints ask:
		// the engine keeps those of the range it evaluates.
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
			var selected []storage.Series
			for _, s := range all {
				if matchesAll(s.Labels(), matchers) {
					selected = append(selected, s)
				}
			}
			return &seriesSet{series: selected, next: -1}
		},
	}}
}

// matchesAll tells whether ls satisfies every matcher; a label ls lacks
// has the empty value, as in a selector.
func matchesAll(ls labels.Labels, matchers []*labels.Matcher) bool {
	for _, m := range matchers {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// seriesSet is a SeriesSet over a slice, in the slice's order (load sorts
// it by labels, so a sorted set is always what is given).
type seriesSet struct {
	series []storage.Series
	next   int
}

var _ storage.SeriesSet = &seriesSet{}

func (s *seriesSet) Next() bool {
	if s.next < len(s.series) {
		s.next++
	}
	return s.next < len(s.series)
}

func (s *seriesSet) At() storage.Series              { return s.series[s.next] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is one loaded value: a float at t, in milliseconds since the
// Unix epoch, with no start timestamp.
type floatSample struct {
	t int64
	f float64
}

var _ chunks.Sample = floatSample{}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }
