package apiserver

import (
	"io"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/metrics/pkg/apis/metrics"
	metricsv1 "k8s.io/metrics/pkg/apis/metrics/v1"
	"k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// The JSON of metrics.k8s.io answers is written here rather than by the
// reflection of encoding/json, for the four types and the fields the
// provider fills. BenchmarkListHandler shows why: with encoding/json, the
// encoding of a pod (two containers, four quantities, two times and a
// duration) cost about 5 µs and 24 allocations, most of a list's time and
// all of the gap between the HPA's selector list and its floor, because
// every value-receiver MarshalJSON and every map value is copied to the
// heap first. TestFastJSONMatchesEncodingJSON holds the output to the
// bytes encoding/json writes; anything this writer does not know (another
// type, a metadata field the provider never sets, a string outside plain
// ASCII) is left to the standard serializer.

// metricsJSON is the JSON serializer of the metrics group with the fast
// path in front of it.
type metricsJSON struct{ runtime.Serializer }

// Encode writes obj as encoding/json would.
func (s metricsJSON) Encode(obj runtime.Object, w io.Writer) error {
	b := bufPool.Get().(*[]byte)
	defer bufPool.Put(b)
	var (
		out []byte
		ok  bool
		err error
	)
	switch o := obj.(type) {
	case *v1beta1.PodMetricsList:
		var in metrics.PodMetricsList
		_ = v1beta1.Convert_v1beta1_PodMetricsList_To_metrics_PodMetricsList(o, &in, nil)
		out, ok, err = appendPodList((*b)[:0], &o.TypeMeta, &in, w)
	case *metricsv1.PodMetricsList:
		var in metrics.PodMetricsList
		_ = metricsv1.Convert_v1_PodMetricsList_To_metrics_PodMetricsList(o, &in, nil)
		out, ok, err = appendPodList((*b)[:0], &o.TypeMeta, &in, w)
	case *v1beta1.NodeMetricsList:
		var in metrics.NodeMetricsList
		_ = v1beta1.Convert_v1beta1_NodeMetricsList_To_metrics_NodeMetricsList(o, &in, nil)
		out, ok, err = appendNodeList((*b)[:0], &o.TypeMeta, &in, w)
	case *metricsv1.NodeMetricsList:
		var in metrics.NodeMetricsList
		_ = metricsv1.Convert_v1_NodeMetricsList_To_metrics_NodeMetricsList(o, &in, nil)
		out, ok, err = appendNodeList((*b)[:0], &o.TypeMeta, &in, w)
	}
	switch {
	case !ok:
		return s.Serializer.Encode(obj, w)
	case err != nil:
		return err
	}
	*b = out[:0]
	_, err = w.Write(out)
	return err
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// flushAt is the size past which a list's bytes go to the writer before the
// next item: a list of every pod does not have to fit in memory twice.
const flushAt = 256 << 10

// A list whose first items went to the writer cannot fall back anymore: the
// checks that decide the fallback run over every item first, and a write
// error after that is returned as it is.

func appendPodList(b []byte, tm *metav1.TypeMeta, l *metrics.PodMetricsList, w io.Writer) ([]byte, bool, error) {
	if !emptyListMeta(&l.ListMeta) {
		return b, false, nil
	}
	for i := range l.Items {
		if !plainPod(&l.Items[i]) {
			return b, false, nil
		}
	}
	b, err := appendItems(appendListHead(b, tm), l.Items == nil, len(l.Items), w, func(b []byte, i int) []byte {
		return appendPod(b, &l.Items[i])
	})
	return b, true, err
}

func appendNodeList(b []byte, tm *metav1.TypeMeta, l *metrics.NodeMetricsList, w io.Writer) ([]byte, bool, error) {
	if !emptyListMeta(&l.ListMeta) {
		return b, false, nil
	}
	for i := range l.Items {
		n := &l.Items[i]
		if !plainMeta(&n.ObjectMeta) || !plainUsage(n.Usage) {
			return b, false, nil
		}
	}
	b, err := appendItems(appendListHead(b, tm), l.Items == nil, len(l.Items), w, func(b []byte, i int) []byte {
		n := &l.Items[i]
		b = appendSample(b, &n.ObjectMeta, n.Timestamp, n.Window)
		b = append(b, `,"usage":`...)
		b = appendUsage(b, n.Usage)
		return append(b, '}')
	})
	return b, true, err
}

// appendItems writes a list's n items with item and closes the list,
// handing what it has to w whenever it passes flushAt. A nil list is null,
// as encoding/json writes it. Once bytes went to w an error is final: the
// list cannot be written again.
func appendItems(b []byte, null bool, n int, w io.Writer, item func(b []byte, i int) []byte) ([]byte, error) {
	if null {
		return append(b, "null}\n"...), nil
	}
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = item(b, i)
		if len(b) >= flushAt {
			if _, err := w.Write(b); err != nil {
				return b[:0], err
			}
			b = b[:0]
		}
	}
	return append(b, "]}\n"...), nil
}

func appendListHead(b []byte, tm *metav1.TypeMeta) []byte {
	b = append(b, '{')
	if tm.Kind != "" {
		b = append(b, `"kind":`...)
		b = appendString(b, tm.Kind)
		b = append(b, ',')
	}
	if tm.APIVersion != "" {
		b = append(b, `"apiVersion":`...)
		b = appendString(b, tm.APIVersion)
		b = append(b, ',')
	}
	return append(b, `"metadata":{},"items":`...)
}

func appendPod(b []byte, p *metrics.PodMetrics) []byte {
	b = appendSample(b, &p.ObjectMeta, p.Timestamp, p.Window)
	b = append(b, `,"containers":`...)
	if p.Containers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range p.Containers {
			if i > 0 {
				b = append(b, ',')
			}
			c := &p.Containers[i]
			b = append(b, `{"name":`...)
			b = appendString(b, c.Name)
			b = append(b, `,"usage":`...)
			b = appendUsage(b, c.Usage)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendSample writes the fields pods and nodes share, leaving the object
// open.
func appendSample(b []byte, m *metav1.ObjectMeta, ts metav1.Time, window metav1.Duration) []byte {
	b = append(b, `{"metadata":{`...)
	sep := false
	field := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, name...)
	}
	if m.Name != "" {
		field(`"name":`)
		b = appendString(b, m.Name)
	}
	if m.Namespace != "" {
		field(`"namespace":`)
		b = appendString(b, m.Namespace)
	}
	// A zero creation time is left out (encoding/json honours
	// metav1.Time's IsZero under omitempty); the sample's own timestamp,
	// without omitempty, is written as null.
	if !m.CreationTimestamp.IsZero() {
		field(`"creationTimestamp":`)
		b = appendTime(b, m.CreationTimestamp)
	}
	if len(m.Labels) > 0 {
		field(`"labels":`)
		b = appendStringMap(b, m.Labels)
	}
	if len(m.Annotations) > 0 {
		field(`"annotations":`)
		b = appendStringMap(b, m.Annotations)
	}
	b = append(b, `},"timestamp":`...)
	b = appendTime(b, ts)
	b = append(b, `,"window":"`...)
	// Plain ASCII but for the µ of sub-millisecond durations, which
	// encoding/json writes as it is.
	b = append(b, window.Duration.String()...)
	return append(b, '"')
}

func appendTime(b []byte, t metav1.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"')
}

func appendUsage(b []byte, u corev1.ResourceList) []byte {
	if u == nil {
		return append(b, "null"...)
	}
	// The provider's lists name cpu and memory, in that (sorted) order.
	b = append(b, '{')
	n := 0
	for _, name := range [...]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := u[name]
		if !ok {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendString(b, string(name))
		b = append(b, ':', '"')
		b = appendQuantity(b, &q)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendQuantity writes q's canonical form, as Quantity.MarshalJSON does.
// The provider's quantities carry it already: Quantity.String formats
// (and allocates) only for others.
func appendQuantity(b []byte, q *resource.Quantity) []byte {
	return append(b, q.String()...)
}

func appendStringMap(b []byte, m map[string]string) []byte {
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// appendString quotes a string that plainString accepted.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainString is true of a string encoding/json writes as it is between
// quotes: printable ASCII without the quote, the backslash and the three
// characters it escapes for HTML.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func plainStringMap(m map[string]string) bool {
	for k, v := range m {
		if !plainString(k) || !plainString(v) {
			return false
		}
	}
	return true
}

func emptyListMeta(m *metav1.ListMeta) bool {
	//nolint:staticcheck // deprecated, but encoding/json would write a set SelfLink: leave such a list to it
	return m.SelfLink == "" && m.ResourceVersion == "" && m.Continue == "" && m.RemainingItemCount == nil
}

// plainMeta is true of metadata with only the fields the provider fills:
// name, namespace, creation time, labels and annotations.
func plainMeta(m *metav1.ObjectMeta) bool {
	//nolint:staticcheck // deprecated, but encoding/json would write a set SelfLink: leave such an object to it
	return m.GenerateName == "" && m.SelfLink == "" && m.UID == "" && m.ResourceVersion == "" &&
		m.Generation == 0 && m.DeletionTimestamp == nil && m.DeletionGracePeriodSeconds == nil &&
		m.OwnerReferences == nil && m.Finalizers == nil && m.ManagedFields == nil &&
		plainString(m.Name) && plainString(m.Namespace) &&
		plainStringMap(m.Labels) && plainStringMap(m.Annotations)
}

// plainUsage is true of a usage that names only cpu and memory.
func plainUsage(u corev1.ResourceList) bool {
	for name := range u {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			return false
		}
	}
	return true
}

func plainPod(p *metrics.PodMetrics) bool {
	if !plainMeta(&p.ObjectMeta) {
		return false
	}
	for i := range p.Containers {
		if !plainString(p.Containers[i].Name) || !plainUsage(p.Containers[i].Usage) {
			return false
		}
	}
	return true
}

// negotiated is the group's serializers with metricsJSON for JSON.
type negotiated struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func withFastJSON(ns runtime.NegotiatedSerializer) runtime.NegotiatedSerializer {
	infos := slices.Clone(ns.SupportedMediaTypes())
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeJSON {
			infos[i].Serializer = metricsJSON{infos[i].Serializer}
		}
	}
	return negotiated{NegotiatedSerializer: ns, infos: infos}
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }
