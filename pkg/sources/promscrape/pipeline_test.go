package promscrape

import (
	"context"
	"errors"
	"slices"
	"sort"
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

// Value is one configured metric of one pod or container, its series
// combined.
type Value struct {
	Metric    string
	Value     float64
	Timestamp time.Time
	// Series counts the series combined.
	Series int
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
		b, err := t.Scrape(ctx)
		if b == nil {
			failed = append(failed, TargetError{ID: t.ID(), Reason: sources.Reason(err), Err: err})
			continue
		}
		c.store.StoreSeries(SourceName, t.ID(), b.Series, c.clock.Now())
	}
	c.store.PruneSeries(SourceName, keep)
	return c.read(), failed
}

func (c *collector) read() Batch {
	var out Batch
	pods := slices.Clone(c.pods.ListPods())
	sort.Slice(pods, func(i, j int) bool {
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
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
		for name, vs := range byContainer {
			pv.Containers = append(pv.Containers, ContainerValues{Name: name, Values: vs})
		}
		sort.Slice(pv.Values, func(i, j int) bool { return pv.Values[i].Metric < pv.Values[j].Metric })
		sort.Slice(pv.Containers, func(i, j int) bool { return pv.Containers[i].Name < pv.Containers[j].Name })
		for _, cv := range pv.Containers {
			sort.Slice(cv.Values, func(i, j int) bool { return cv.Values[i].Metric < cv.Values[j].Metric })
		}
		if len(pv.Values) > 0 {
			out.Pods = append(out.Pods, pv)
		}
	}
	return out
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
