package store

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// NamedValue is one series of a named metric as served for a pod: a gauge's
// value, or a counter's rate per second.
type NamedValue struct {
	Container string
	// Series is the series' labels, encoded as sources.SeriesPoint's.
	Series    string
	Value     float64
	Timestamp time.Time
}

// Labels are the series' labels, decoded.
func (v *NamedValue) Labels() map[string]string { return sources.SeriesLabels(v.Series) }

// maxNamedRate bounds a counter's rate: anything above is a reset or
// garbage, never load (1e9 events per second is beyond any serving engine
// or GPU), as maxCores bounds a CPU rate.
const maxNamedRate = 1e9

// named holds the named series of every target that exposes them (pods'
// own endpoints, node exporters), each target's as its last successful
// scrape left them, indexed by the pods they are credited to. A pod's
// series are served, as usage is, while the scrape that brought them is
// within StaleAfter, and only to the pod of the UID they were read for: a
// LeaderWorkerSet recreates a group's pods under their old names, and the
// new pods must not show the old ones' load.
type named struct {
	mu      sync.RWMutex
	targets map[targetKey]*targetSeries
	// pods maps a pod to the targets that credit it with series.
	pods map[podKey]map[targetKey]struct{}
}

type targetKey struct{ source, id string }

// targetSeries is what one scrape of one target left. Never mutated after
// it is stored.
type targetSeries struct {
	storedAt time.Time
	pods     map[podKey][]namedPoint
}

// namedPoint is the state of one series: its last sample and the value
// served from it.
type namedPoint struct {
	uid, metric, container, series string
	exporter                       bool
	sample                         float64
	ts                             time.Time
	// value is served when has: a gauge's sample, or the counter's rate
	// over its last two samples.
	value float64
	has   bool
}

func (p *namedPoint) sameSeries(q *namedPoint) bool {
	return p.uid == q.uid && p.metric == q.metric && p.container == q.container && p.series == q.series
}

// StoreSeries implements sources.SeriesSink.
func (s *Store) StoreSeries(source, id string, series []sources.SeriesPoint, scrapedAt time.Time) {
	key := targetKey{source, id}
	s.named.mu.Lock()
	defer s.named.mu.Unlock()
	prev := s.named.targets[key]
	var next *targetSeries
	if len(series) > 0 {
		next = &targetSeries{storedAt: scrapedAt, pods: map[podKey][]namedPoint{}}
		for i := range series {
			sp := &series[i]
			pk := podKey{sp.Namespace, sp.Pod}
			p := namedPoint{uid: sp.UID, metric: sp.Metric, container: sp.Container, series: sp.Series,
				sample: sp.Value, ts: sp.Timestamp, exporter: sp.Exporter}
			if !sp.Counter {
				p.value, p.has = p.sample, true
			} else if prev != nil {
				p.value, p.has = counterRate(prev.pods[pk], &p)
			}
			next.pods[pk] = append(next.pods[pk], p)
		}
	}
	s.named.replace(key, prev, next)
	s.gen.Add(1)
}

// counterRate is the rate of p's counter since its sample among prev: the
// rule of a CPU counter's (rates.next), with no start time to go by and no
// minimum window, since these times are the scraper's own, not cut to the
// second. A counter that went back was reset, a time that did not move
// forward gives no rate, and neither does a rate above maxNamedRate: p is
// then the baseline of the next one.
func counterRate(prev []namedPoint, p *namedPoint) (float64, bool) {
	for i := range prev {
		q := &prev[i]
		if !q.sameSeries(p) {
			continue
		}
		dt := p.ts.Sub(q.ts).Seconds()
		dv := p.sample - q.sample
		if dt <= 0 || !(dv >= 0) {
			return 0, false
		}
		r := dv / dt
		return r, !math.IsInf(r, 0) && r <= maxNamedRate
	}
	return 0, false
}

// replace makes next (nil for none) the series of target key in place of
// prev, and moves the pods' index and the points gauge. Callers hold mu.
func (n *named) replace(key targetKey, prev, next *targetSeries) {
	if n.targets == nil {
		n.targets, n.pods = map[targetKey]*targetSeries{}, map[podKey]map[targetKey]struct{}{}
	}
	delta := 0
	if prev != nil {
		for pk, pts := range prev.pods {
			delta -= len(pts)
			if next == nil || next.pods[pk] == nil {
				delete(n.pods[pk], key)
				if len(n.pods[pk]) == 0 {
					delete(n.pods, pk)
				}
			}
		}
	}
	if next == nil {
		delete(n.targets, key)
	} else {
		n.targets[key] = next
		for pk, pts := range next.pods {
			delta += len(pts)
			if n.pods[pk] == nil {
				n.pods[pk] = map[targetKey]struct{}{}
			}
			n.pods[pk][key] = struct{}{}
		}
	}
	if delta != 0 {
		storedPoints.WithLabelValues("series").Add(float64(delta))
	}
}

// PruneSeries implements sources.SeriesSink.
func (s *Store) PruneSeries(source string, keep map[string]struct{}) {
	s.named.mu.Lock()
	defer s.named.mu.Unlock()
	for key, ts := range s.named.targets {
		if _, ok := keep[key.id]; key.source == source && !ok {
			s.named.replace(key, ts, nil)
			s.gen.Add(1)
		}
	}
}

// Credited reports whether a target that credits the pod or object
// namespace/name (sources.ObjectKey) was read within StaleAfter, whether or
// not it gave a series of any metric there: a sum of a metric it has no
// series of is then known to be one of nothing.
func (s *Store) Credited(namespace, name string) bool {
	now := s.clock.Now()
	s.named.mu.RLock()
	defer s.named.mu.RUnlock()
	for k := range s.named.pods[podKey{namespace, name}] {
		if s.fresh(s.named.targets[k].storedAt, now) {
			return true
		}
	}
	return false
}

// Series returns the fresh values of metric credited to the pod
// namespace/name whose UID is uid ("" matches any), sorted by container and
// labels. A container's series from the pod's own endpoint hide an
// exporter's of the same metric and container. A series two targets credit
// (two exporter pods on one node while a DaemonSet rolls) counts once, from
// the target first by ID.
func (s *Store) Series(namespace, name, uid, metric string) []NamedValue {
	now := s.clock.Now()
	pk := podKey{namespace, name}
	s.named.mu.RLock()
	defer s.named.mu.RUnlock()
	keys := make([]targetKey, 0, len(s.named.pods[pk]))
	for k := range s.named.pods[pk] {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].source != keys[j].source {
			return keys[i].source < keys[j].source
		}
		return keys[i].id < keys[j].id
	})
	type seriesKey struct{ container, series string }
	seen := map[seriesKey]bool{}
	own := map[string]bool{} // containers with series of the pod's own
	var pts []*namedPoint
	// The pod's own series first, then the exporters' where it has none.
	for _, fromExporter := range []bool{false, true} {
		for _, k := range keys {
			ts := s.named.targets[k]
			if !s.fresh(ts.storedAt, now) {
				continue
			}
			for i := range ts.pods[pk] {
				p := &ts.pods[pk][i]
				sk := seriesKey{p.container, p.series}
				switch {
				case p.exporter != fromExporter || !p.has || p.metric != metric || seen[sk]:
				case p.uid != "" && uid != "" && p.uid != uid:
				case fromExporter && own[p.container]:
				default:
					seen[sk] = true
					own[p.container] = own[p.container] || !fromExporter
					pts = append(pts, p)
				}
			}
		}
	}
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].container != pts[j].container {
			return pts[i].container < pts[j].container
		}
		return pts[i].series < pts[j].series
	})
	out := make([]NamedValue, len(pts))
	for i, p := range pts {
		out[i] = NamedValue{Container: p.container, Series: p.series, Value: p.value, Timestamp: p.ts}
	}
	return out
}
