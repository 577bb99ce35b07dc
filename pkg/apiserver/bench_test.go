package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/metrics/pkg/apis/metrics"
)

// listedPods is a getter that answers every list with the same items, so a
// benchmark of the handler measures the API layer alone: request info, the
// list handler, conversion and encoding.
type listedPods struct {
	byNamespace map[string][]metrics.PodMetrics
	all         []metrics.PodMetrics
}

func (l *listedPods) GetPodMetrics(context.Context, string, string) (*metrics.PodMetrics, error) {
	return nil, fmt.Errorf("not in this benchmark")
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
		m := metrics.PodMetrics{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("deploy-%d-%05d", i/30, i), Namespace: ns,
				Labels:            map[string]string{"app": fmt.Sprintf("deploy-%d", i/30)},
				CreationTimestamp: metav1.NewTime(now),
			},
			Timestamp: metav1.NewTime(now.Add(-3 * time.Second)),
			Window:    metav1.Duration{Duration: 15 * time.Second},
		}
		for c := range 2 {
			// As the provider makes them: with their strings formatted.
			cpu := resource.NewScaledQuantity(int64(12345678+i), resource.Nano)
			mem := resource.NewQuantity(int64(50<<20+i*4096), resource.BinarySI)
			_, _ = cpu.String(), mem.String()
			m.Containers = append(m.Containers, metrics.ContainerMetrics{
				Name:  fmt.Sprintf("c%d", c),
				Usage: corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem},
			})
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
