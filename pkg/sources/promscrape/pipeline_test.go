package promscrape

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// collector runs a Source's targets of one tick, as the scraper would but
// one after another in their order (so a budget's outcome is the same at
// every run), stores their series in a store, and reads every listed pod's
// values back, each metric's series combined by its rule as the provider
// combines them.
type collector struct {
	*Source
	store *store.Store
}

func newCollector(t *testing.T, cfg *Config, pods PodLister, o Options) *collector {
	t.Helper()
	var clk clock.Clock = clock.RealClock{}
	if c, ok := o.Clock.(clock.Clock); ok {
		clk = c
	}
	st := store.New(store.Config{Clock: clk, Sources: []string{SourceName}, StaleAfter: time.Hour})
	return &collector{Source: NewSource(cfg, pods, o), store: st}
}

// Value is one configured metric of one pod or container, its Series
// (how many) combined.
type Value struct {
	Metric    string
	Value     float64
	Timestamp time.Time
	Series    int
}

type ContainerValues struct {
	Name   string
	Values []Value
}

type PodValues struct {
	Namespace, Name, UID string
	Values               []Value
	Containers           []ContainerValues
}

// Batch is the pods with values, sorted by namespace and name.
type Batch struct{ Pods []PodValues }

// TargetError is a target that failed, with its reason.
type TargetError struct {
	ID, Reason string
	Err        error
}

// Collect runs one tick and returns the listed pods' values and the failed
// targets.
func (c *collector) Collect(ctx context.Context) (Batch, []TargetError) {
	targets, err := c.Targets()
	if err != nil {
		return Batch{}, []TargetError{{Err: err}}
	}
	keep := map[string]struct{}{}
	var failed []TargetError
	for _, t := range targets {
		keep[t.ID()] = struct{}{}
		if b, err := t.Scrape(ctx); b == nil {
			failed = append(failed, TargetError{ID: t.ID(), Reason: sources.Reason(err), Err: err})
		} else {
			c.store.StoreSeries(SourceName, t.ID(), b.Series, c.clock.Now())
		}
	}
	c.store.PruneSeries(SourceName, keep)
	return c.read(), failed
}

// collectOK is Collect, failing t on any failed target.
func (c *collector) collectOK(t *testing.T) Batch {
	t.Helper()
	b, errs := c.Collect(t.Context())
	if len(errs) > 0 {
		t.Fatalf("Collect: %v", errs)
	}
	return b
}

func (c *collector) read() Batch {
	var out Batch
	pods := slices.Clone(c.pods.ListPods())
	slices.SortFunc(pods, func(a, b Pod) int { return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	for _, p := range pods {
		pv := PodValues{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		byContainer := map[string][]Value{}
		for _, m := range c.cfg.Metrics {
			series := c.store.Series(p.Namespace, p.Name, p.UID, m.Name)
			if len(series) == 0 {
				continue
			}
			pv.Values = append(pv.Values, combined(m, series))
			perContainer := map[string][]store.NamedValue{}
			for _, s := range series {
				if s.Container != "" {
					perContainer[s.Container] = append(perContainer[s.Container], s)
				}
			}
			for name, cs := range perContainer {
				byContainer[name] = append(byContainer[name], combined(m, cs))
			}
		}
		if len(pv.Values) == 0 {
			continue
		}
		sortValues(pv.Values)
		for _, name := range slices.Sorted(maps.Keys(byContainer)) {
			sortValues(byContainer[name])
			pv.Containers = append(pv.Containers, ContainerValues{Name: name, Values: byContainer[name]})
		}
		out.Pods = append(out.Pods, pv)
	}
	return out
}

func sortValues(vs []Value) {
	slices.SortFunc(vs, func(a, b Value) int { return cmp.Compare(a.Metric, b.Metric) })
}

// combined is the series of one metric combined by its rule; the timestamp
// is the newest.
func combined(m Metric, series []store.NamedValue) Value {
	vs := make([]group.Value, len(series))
	out := Value{Metric: m.Name, Series: len(series)}
	for i, s := range series {
		vs[i] = group.Value{State: group.Counted, Value: s.Value}
		if s.Timestamp.After(out.Timestamp) {
			out.Timestamp = s.Timestamp
		}
	}
	v, err := m.Combine.Of(vs)
	if err != nil {
		panic(errors.Join(errors.New("combining a pod's series"), err))
	}
	out.Value = v
	return out
}
