package promscrape

import (
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
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
	// Points are the combined series one by one, with their labels, so a
	// reader can combine a subset (a metricLabelSelector) by the same rule.
	Points []Point
}

// Point is one series of a Value: its labels as the exposition gave them
// and its value (a counter's rate).
type Point struct {
	Labels map[string]string
	Value  float64
}

// Select combines, by rule, the points whose labels sel matches; false when
// none does. A nil selector selects every point.
func (v *Value) Select(sel labels.Selector, rule Combine) (float64, bool) {
	if sel == nil || sel.Empty() {
		return v.Value, v.Series > 0
	}
	a := acc{combine: rule}
	for _, p := range v.Points {
		if sel.Matches(labels.Set(p.Labels)) {
			a.add(p.Value, v.Timestamp)
		}
	}
	if a.n == 0 {
		return 0, false
	}
	return a.value("").Value, true
}

// ContainerValues are the values of series labelled with a container.
type ContainerValues struct {
	Name   string
	Values []Value
}

// PodValues are a pod's values: Values over all its series (labelled with
// a container or not), and per container where series name one.
type PodValues struct {
	Namespace string
	Name      string
	// UID is the UID of the pod the values were collected for, as the
	// collection listed the pods; "" when the list did not hold it (an
	// exporter named a pod that does not run). A pod recreated under the
	// same name has another UID, so a reader can tell its values from its
	// predecessor's.
	UID        string
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
	points  []Point
}

func (a *acc) addPoint(v float64, ts time.Time, series string) {
	a.add(v, ts)
	a.points = append(a.points, Point{Labels: seriesLabels(series), Value: v})
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
	v := Value{Metric: name, Timestamp: a.ts, Series: a.n, Points: a.points}
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
	// Points are kept for the pod's values only, not again per container.
	add := func(m map[int]*acc, s Sample, points bool) {
		a, ok := m[s.Metric]
		if !ok {
			a = &acc{combine: metrics[s.Metric].Combine}
			m[s.Metric] = a
		}
		if points {
			a.addPoint(s.Value, s.Timestamp, s.Series)
		} else {
			a.add(s.Value, s.Timestamp)
		}
	}
	for _, s := range samples {
		k := podKey{s.Namespace, s.Pod}
		p, ok := pods[k]
		if !ok {
			p = &podAcc{all: map[int]*acc{}, containers: map[string]map[int]*acc{}}
			pods[k] = p
		}
		add(p.all, s, true)
		if s.Container != "" {
			c, ok := p.containers[s.Container]
			if !ok {
				c = map[int]*acc{}
				p.containers[s.Container] = c
			}
			add(c, s, false)
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

// seriesLabels reads back a Sample's Series key (name=value pairs, each
// ended by a NUL byte; a label name holds no '=').
func seriesLabels(series string) map[string]string {
	if series == "" {
		return nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(strings.TrimSuffix(series, "\x00"), "\x00") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			out[k] = v
		}
	}
	return out
}
