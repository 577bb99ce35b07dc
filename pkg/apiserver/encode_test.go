package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/metrics/pkg/apis/metrics"
	metricsv1 "k8s.io/metrics/pkg/apis/metrics/v1"
	"k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// jsonEncoders are the encoders for gv of the JSON serializer the metrics
// group is served with, with the fast path in front of it and without.
func jsonEncoders(t testing.TB, gv schema.GroupVersion) (fast, std runtime.Encoder) {
	t.Helper()
	ns := genericapiserver.NewDefaultAPIGroupInfo(metrics.GroupName, Scheme, metav1.ParameterCodec, Codecs).NegotiatedSerializer
	enc := func(s runtime.NegotiatedSerializer) runtime.Encoder {
		info, ok := runtime.SerializerInfoForMediaType(s.SupportedMediaTypes(), runtime.ContentTypeJSON)
		if !ok {
			t.Fatal("no JSON serializer")
		}
		return ns.EncoderForVersion(info.Serializer, gv)
	}
	return enc(withFastJSON(ns)), enc(ns)
}

// encodeBoth encodes obj as the API layer would for gv, with and without
// the fast path.
func encodeBoth(t testing.TB, obj runtime.Object, gv schema.GroupVersion) (fast, std string) {
	t.Helper()
	fastEnc, stdEnc := jsonEncoders(t, gv)
	var a, b bytes.Buffer
	if err := fastEnc.Encode(obj.DeepCopyObject(), &a); err != nil {
		t.Fatalf("fast: %v", err)
	}
	if err := stdEnc.Encode(obj.DeepCopyObject(), &b); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	return a.String(), b.String()
}

var versions = []schema.GroupVersion{v1beta1.SchemeGroupVersion, metricsv1.SchemeGroupVersion}

func TestFastJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	usage := corev1.ResourceList{corev1.ResourceCPU: *resource.NewScaledQuantity(12345678, resource.Nano),
		corev1.ResourceMemory: *resource.NewQuantity(50<<20, resource.BinarySI)}
	pod := func(mut func(*metrics.PodMetrics)) metrics.PodMetrics {
		p := metrics.PodMetrics{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "prod", CreationTimestamp: metav1.NewTime(at), Labels: map[string]string{"b": "2", "a": "1"}},
			Timestamp:  metav1.NewTime(at.Add(-time.Second)), Window: metav1.Duration{Duration: 15 * time.Second},
			Containers: []metrics.ContainerMetrics{{Name: "app", Usage: usage}},
		}
		mut(&p)
		return p
	}
	// pods is a list of one pod changed by each mut.
	pods := func(muts ...func(*metrics.PodMetrics)) *metrics.PodMetricsList {
		l := &metrics.PodMetricsList{Items: []metrics.PodMetrics{}}
		for _, mut := range muts {
			l.Items = append(l.Items, pod(mut))
		}
		return l
	}
	same := func(*metrics.PodMetrics) {}
	cases := map[string]runtime.Object{
		"empty pod list": &metrics.PodMetricsList{},
		"empty items":    pods(),
		"one pod":        pods(same),
		"group leader annotations": pods(func(p *metrics.PodMetrics) {
			p.Annotations = map[string]string{"metrics.group-metrics-server.io/group-size": "4"}
		}),
		"nil containers and usage": pods(func(p *metrics.PodMetrics) { p.Containers = nil },
			func(p *metrics.PodMetrics) { p.Containers = []metrics.ContainerMetrics{{Name: "a"}} },
			func(p *metrics.PodMetrics) { p.Containers = []metrics.ContainerMetrics{} },
			func(p *metrics.PodMetrics) { p.Containers[0].Usage = corev1.ResourceList{} }),
		"zero times": pods(func(p *metrics.PodMetrics) {
			p.CreationTimestamp, p.Timestamp, p.Window = metav1.Time{}, metav1.Time{}, metav1.Duration{}
		}),
		"sub-millisecond window": pods(func(p *metrics.PodMetrics) { p.Window = metav1.Duration{Duration: 1500 * time.Nanosecond} }),
		"escaped strings fall back": pods(func(p *metrics.PodMetrics) {
			p.Annotations = map[string]string{"note": "a<b> & \"c\" \u2028 é \x01"}
		}),
		"other fields fall back": pods(func(p *metrics.PodMetrics) { p.UID, p.ResourceVersion = "u-1", "7" }),
		"other resources fall back": pods(func(p *metrics.PodMetrics) {
			p.Containers[0].Usage = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}),
		"list metadata falls back": &metrics.PodMetricsList{ListMeta: metav1.ListMeta{ResourceVersion: "3"}},
		"one pod, not a list":      func() runtime.Object { p := pod(same); return &p }(),
		"empty node list":          &metrics.NodeMetricsList{},
		"nodes": &metrics.NodeMetricsList{Items: []metrics.NodeMetrics{
			{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(at), Labels: map[string]string{"kubernetes.io/hostname": "n1"}}, Timestamp: metav1.NewTime(at), Window: metav1.Duration{Duration: 10 * time.Second}, Usage: usage},
			{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		}},
	}
	for name, obj := range cases {
		for _, gv := range versions {
			t.Run(name+"/"+gv.Version, func(t *testing.T) {
				fast, std := encodeBoth(t, obj, gv)
				if fast != std {
					t.Errorf("fast path wrote\n%s\nencoding/json wrote\n%s", fast, std)
				}
			})
		}
	}
}

// TestFastJSONLargeList covers a list written to the writer in parts.
func TestFastJSONLargeList(t *testing.T) {
	l := randomPods(rand.New(rand.NewPCG(1, 2)), 3000)
	for _, gv := range versions {
		fast, std := encodeBoth(t, l, gv)
		if len(std) < 2*flushAt {
			t.Fatalf("the list is %d bytes, want more than %d to cover flushing", len(std), 2*flushAt)
		}
		if fast != std {
			t.Errorf("%s: the fast path's %d bytes differ from encoding/json's %d", gv, len(fast), len(std))
		}
	}
}

// failingWriter fails every write once more than flushAt bytes were
// written, and counts the writes tried after its first failure.
type failingWriter struct {
	n, afterFailure int
	failed          bool
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.failed {
		w.afterFailure++
		return 0, errors.New("client went away")
	}
	if w.n += len(p); w.n > flushAt {
		w.failed = true
		return 0, errors.New("client went away")
	}
	return len(p), nil
}

// TestFastJSONWriteError: a list whose writer fails part way is not
// written again by the standard serializer after the bytes already sent.
func TestFastJSONWriteError(t *testing.T) {
	enc, _ := jsonEncoders(t, v1beta1.SchemeGroupVersion)
	w := &failingWriter{}
	if err := enc.Encode(randomPods(rand.New(rand.NewPCG(3, 4)), 3000), w); err == nil {
		t.Fatal("a list whose writer fails encoded without an error")
	}
	if !w.failed || w.afterFailure != 0 {
		t.Errorf("writer failed: %v, writes after the failure: %d; want one failure and no write after it", w.failed, w.afterFailure)
	}
}

// randomPods are pods as the provider shapes them, with the values spread.
func randomPods(rng *rand.Rand, n int) *metrics.PodMetricsList {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	quantities := []func() resource.Quantity{
		func() resource.Quantity { return *resource.NewScaledQuantity(rng.Int64N(1e12), resource.Nano) },
		func() resource.Quantity { return *resource.NewMilliQuantity(rng.Int64N(1e6), resource.DecimalSI) },
		func() resource.Quantity { return *resource.NewQuantity(rng.Int64N(1<<40), resource.BinarySI) },
		func() resource.Quantity { return *resource.NewQuantity(0, resource.DecimalSI) },
	}
	q := func() resource.Quantity { return quantities[rng.IntN(len(quantities))]() }
	l := &metrics.PodMetricsList{}
	for i := range n {
		p := metrics.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: fmt.Sprintf("ns-%d", rng.IntN(50)),
			CreationTimestamp: metav1.NewTime(at.Add(time.Duration(rng.Int64N(1e12))))},
			Timestamp: metav1.NewTime(at.Add(-time.Duration(rng.Int64N(1e11)))),
			Window:    metav1.Duration{Duration: time.Duration(rng.Int64N(int64(time.Minute)))},
		}
		if k := rng.IntN(20); k > 0 {
			p.Labels = map[string]string{}
			for j := range k {
				p.Labels[fmt.Sprintf("k%d.example.com/%s", j, strings.Repeat("x", rng.IntN(5)))] = fmt.Sprint(rng.IntN(1000))
			}
		}
		for c := range rng.IntN(4) {
			u := corev1.ResourceList{}
			if rng.IntN(8) > 0 {
				u[corev1.ResourceCPU] = q()
			}
			if rng.IntN(8) > 0 {
				u[corev1.ResourceMemory] = q()
			}
			p.Containers = append(p.Containers, metrics.ContainerMetrics{Name: fmt.Sprintf("c%d", c), Usage: u})
		}
		l.Items = append(l.Items, p)
	}
	return l
}

func FuzzFastJSON(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, uint8(i*3))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		l := randomPods(rand.New(rand.NewPCG(seed, uint64(n))), int(n)%40)
		for _, gv := range versions {
			if fast, std := encodeBoth(t, l, gv); fast != std {
				t.Fatalf("%s: fast path wrote\n%s\nencoding/json wrote\n%s", gv, fast, std)
			}
		}
	})
}

// TestFastJSONTakesThePlainPath makes sure the comparisons above compare the
// fast path, not the fallback, for what the provider answers.
func TestFastJSONTakesThePlainPath(t *testing.T) {
	l := randomPods(rand.New(rand.NewPCG(5, 6)), 100)
	if _, ok, _ := appendPodList(nil, &metav1.TypeMeta{}, l, &bytes.Buffer{}); !ok {
		t.Error("a list of plain pods fell back to encoding/json")
	}
	l.Items[7].Annotations = map[string]string{"a": "<"}
	if _, ok, _ := appendPodList(nil, &metav1.TypeMeta{}, l, &bytes.Buffer{}); ok {
		t.Error("a list with a string to escape took the fast path")
	}
}

// listedPods is a getter that answers every list with the same items, so a
// benchmark of the handler measures the API layer alone: request info, the
// list handler, conversion and encoding.
type listedPods struct {
	byNamespace map[string][]metrics.PodMetrics
	all         []metrics.PodMetrics
}

func (l *listedPods) GetPodMetrics(context.Context, string, string) (*metrics.PodMetrics, error) {
	return nil, errors.New("not in this benchmark")
}

func (l *listedPods) ListPodMetrics(_ context.Context, namespace string, _ labels.Selector, _ fields.Selector) ([]metrics.PodMetrics, error) {
	if namespace == "" {
		return l.all, nil
	}
	return l.byNamespace[namespace], nil
}

func (l *listedPods) GetNodeMetrics(context.Context, string) (*metrics.NodeMetrics, error) {
	return nil, fmt.Errorf("not in this benchmark")
}

func (l *listedPods) ListNodeMetrics(context.Context, labels.Selector, fields.Selector) ([]metrics.NodeMetrics, error) {
	return nil, nil
}

// benchPods is n pods of two containers in namespaces of 30, shaped as the
// provider shapes them.
func benchPods(n int) *listedPods {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l := &listedPods{byNamespace: map[string][]metrics.PodMetrics{}}
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i/30)
		m := metrics.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("deploy-%d-%05d", i/30, i), Namespace: ns,
			Labels: map[string]string{"app": fmt.Sprintf("deploy-%d", i/30)}, CreationTimestamp: metav1.NewTime(now)},
			Timestamp: metav1.NewTime(now.Add(-3 * time.Second)), Window: metav1.Duration{Duration: 15 * time.Second},
		}
		for c := range 2 {
			// As the provider makes them: with their strings formatted.
			cpu := resource.NewScaledQuantity(int64(12345678+i), resource.Nano)
			mem := resource.NewQuantity(int64(50<<20+i*4096), resource.BinarySI)
			_, _ = cpu.String(), mem.String()
			m.Containers = append(m.Containers, metrics.ContainerMetrics{Name: fmt.Sprintf("c%d", c),
				Usage: corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem}})
		}
		l.all = append(l.all, m)
		l.byNamespace[ns] = append(l.byNamespace[ns], m)
	}
	return l
}

// benchHandler is the metrics API's handler chain with authentication and
// authorization left out: what remains is what every request pays.
func benchHandler(b *testing.B, getter *listedPods) http.Handler {
	b.Helper()
	cfg := genericapiserver.NewRecommendedConfig(Codecs)
	cfg.LoopbackClientConfig = &rest.Config{Host: "127.0.0.1:1"}
	cfg.ExternalAddress = "127.0.0.1:443"
	cfg.EffectiveVersion = nil
	s, err := (&Config{Generic: cfg, Pods: getter, Nodes: getter}).Complete().New()
	if err != nil {
		b.Fatal(err)
	}
	return s.Handler
}

// BenchmarkListHandler serves lists through the API layer: the HPA's
// namespaced selector request (30 pods), its floor (a namespace without
// pods), and the list of all pods, in JSON as kubectl asks and in protobuf
// as the HPA's client does.
func BenchmarkListHandler(b *testing.B) {
	const pods = 15000
	h := benchHandler(b, benchPods(pods))
	cases := []struct{ name, path string }{
		{"floor", "/apis/metrics.k8s.io/v1beta1/namespaces/empty/pods?labelSelector=app%3Ddeploy-3"},
		{"selector", "/apis/metrics.k8s.io/v1beta1/namespaces/ns-3/pods?labelSelector=app%3Ddeploy-3"},
		{"all", "/apis/metrics.k8s.io/v1beta1/pods"},
	}
	for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		for _, c := range cases {
			b.Run(c.name+"/"+accept[len("application/"):], func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodGet, c.path, nil)
					req.Header.Set("Accept", accept)
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("%s: %d %s", c.path, rec.Code, rec.Body.String())
					}
				}
			})
		}
	}
}
