package promscrape

import (
	"sort"
	"time"
)

// Value is one configured metric of one pod or container.
type Value struct {
	// Metric is the served name (Metric.Name).
	Metric string
	// Value is the gauge's value, or the counter's rate per second, after
	// the pod's series of this metric were combined by the metric's rule.
	Value float64
	// Timestamp is the newest sample timestamp among the combined series.
	Timestamp time.Time
	// Series counts the series combined.
	Series int
}

// ContainerValues are the values of series labelled with a container.
type ContainerValues struct {
	Name   string
	Values []Value
}

// PodValues are a pod's values: Values over all its series (labelled with
// a container or not), and per container where series name one.
type PodValues struct {
	Namespace  string
	Name       string
	Values     []Value
	Containers []ContainerValues
}

// Batch is what one tick collected, pods sorted by namespace and name,
// values by metric name.
type Batch struct {
	Pods []PodValues
}

type podKey struct{ namespace, name string }

type acc struct {
	combine Combine
	sum     float64
	max     float64
	n       int
	ts      time.Time
}

func (a *acc) add(v float64, ts time.Time) {
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.sum += v
	a.n++
	if ts.After(a.ts) {
		a.ts = ts
	}
}

func (a *acc) value(name string) Value {
	v := Value{Metric: name, Timestamp: a.ts, Series: a.n}
	switch a.combine {
	case CombineMax:
		v.Value = a.max
	case CombineMean:
		v.Value = a.sum / float64(a.n)
	default:
		v.Value = a.sum
	}
	return v
}

// Collate groups samples by pod and container and combines the series of
// each metric with the metric's rule.
func Collate(metrics []Metric, samples []Sample) Batch {
	type podAcc struct {
		all        map[int]*acc
		containers map[string]map[int]*acc
	}
	pods := map[podKey]*podAcc{}
	add := func(m map[int]*acc, s Sample) {
		a, ok := m[s.Metric]
		if !ok {
			a = &acc{combine: metrics[s.Metric].Combine}
			m[s.Metric] = a
		}
		a.add(s.Value, s.Timestamp)
	}
	for _, s := range samples {
		k := podKey{s.Namespace, s.Pod}
		p, ok := pods[k]
		if !ok {
			p = &podAcc{all: map[int]*acc{}, containers: map[string]map[int]*acc{}}
			pods[k] = p
		}
		add(p.all, s)
		if s.Container != "" {
			c, ok := p.containers[s.Container]
			if !ok {
				c = map[int]*acc{}
				p.containers[s.Container] = c
			}
			add(c, s)
		}
	}
	values := func(m map[int]*acc) []Value {
		out := make([]Value, 0, len(m))
		for i, a := range m {
			out = append(out, a.value(metrics[i].Name))
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Metric < out[j].Metric })
		return out
	}
	b := Batch{Pods: make([]PodValues, 0, len(pods))}
	for k, p := range pods {
		pv := PodValues{Namespace: k.namespace, Name: k.name, Values: values(p.all)}
		for name, c := range p.containers {
			pv.Containers = append(pv.Containers, ContainerValues{Name: name, Values: values(c)})
		}
		sort.Slice(pv.Containers, func(i, j int) bool { return pv.Containers[i].Name < pv.Containers[j].Name })
		b.Pods = append(b.Pods, pv)
	}
	sort.Slice(b.Pods, func(i, j int) bool {
		if b.Pods[i].Namespace != b.Pods[j].Namespace {
			return b.Pods[i].Namespace < b.Pods[j].Namespace
		}
		return b.Pods[i].Name < b.Pods[j].Name
	})
	return b
}
