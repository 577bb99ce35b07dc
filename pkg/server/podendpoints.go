package server

import (
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/podvalues"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// podEndpoints is the pod-endpoint source as the server runs it: its loop
// and the store the provider reads.
type podEndpoints struct {
	cfg      *promscrape.Config
	store    *podvalues.Store
	loop     *podvalues.Loop
	interval time.Duration
}

// newPodEndpoints builds the source of a parsed configuration, collecting
// every interval (the configuration's, else the resolution).
func (c CompletedConfig) newPodEndpoints(pods podcache.Pods) *podEndpoints {
	promscrape.RegisterMetrics()
	podvalues.RegisterMetrics()
	interval := c.PodMetrics.Interval.Duration
	if interval == 0 {
		interval = c.Resolution
	}
	// A plain transport: no proxy from the environment (pod IPs are
	// reached directly) and no credentials of any kind; https targets
	// are verified against the system roots. A pod's endpoint chooses
	// its response headers, so their size is bounded (net/http's default
	// is 1 MiB per response).
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 1
	transport.MaxResponseHeaderBytes = maxEndpointHeaderBytes
	src := promscrape.NewSource(c.PodMetrics, endpointPods{pods}, promscrape.Options{
		Client:      &http.Client{Transport: transport},
		Clock:       c.Clock,
		Concurrency: c.Concurrency,
	})
	st := podvalues.NewStore(podvalues.StoreConfig{
		Clock:      c.Clock,
		StaleAfter: 2*interval + c.PodMetrics.Timeout.Duration,
		PodUID: func(namespace, name string) (string, bool) {
			if p, ok := pods.Pod(namespace, name); ok {
				return p.UIDString(), true
			}
			return "", false
		},
	})
	loop := podvalues.NewLoop(podvalues.LoopConfig{Source: src, Store: st, Clock: c.Clock, Interval: interval})
	return &podEndpoints{cfg: c.PodMetrics, store: st, loop: loop, interval: interval}
}

// maxEndpointHeaderBytes bounds the response headers of a pod endpoint or
// node exporter: a Prometheus endpoint sends a few short headers.
const maxEndpointHeaderBytes = 64 << 10

// ready is the readiness check of the pod-endpoint source: a replica
// answers once the loop has completed the collections its values need, one
// for gauges and two when a metric is a counter (a rate needs two
// samples), so that a restarted replica does not serve every pod's
// endpoint values as missing. A collection counts whatever its targets
// gave: a target that keeps failing must not keep the replica unready.
func (e *podEndpoints) ready() func(*http.Request) error {
	need := int64(1)
	for _, m := range e.cfg.Metrics {
		if m.Type == promscrape.Counter {
			need = 2
		}
	}
	return func(*http.Request) error {
		if done := e.loop.Ticks(); done < need {
			return fmt.Errorf("pod endpoints collected %d times, %d needed for their values", done, need)
		}
		return nil
	}
}

// endpointPods is the pod cache as the pod-endpoint source lists it.
type endpointPods struct{ pods podcache.Pods }

var _ promscrape.PodLister = endpointPods{}

// ListPods implements promscrape.PodLister. Only Running pods with an IP
// can be targets, so only those are handed over.
func (l endpointPods) ListPods() []promscrape.Pod {
	all := l.pods.List("", labels.Everything())
	out := make([]promscrape.Pod, 0, len(all))
	for _, p := range all {
		if p.Phase() != corev1.PodRunning || p.IP() == "" || p.Deleting() {
			continue
		}
		out = append(out, promscrape.Pod{
			Namespace: p.Namespace, Name: p.Name, UID: p.UIDString(),
			Labels: p.Labels, Annotations: p.Annotations,
			IP: p.IP(), Node: p.NodeName(), Running: true, Ready: p.Ready(),
			HostNetwork: p.HostNetwork(), ServiceAccount: p.ServiceAccount(),
		})
	}
	return out
}
