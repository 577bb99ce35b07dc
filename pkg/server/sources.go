package server

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
)

// sources builds the configured sources, in lookup order.
func (c CompletedConfig) sources(nodes podcache.Nodes, pods podcache.Pods) ([]sources.Source, []string, error) {
	names := c.Sources
	if len(names) == 0 {
		names = []string{kubelet.SourceName}
	}
	var out []sources.Source
	for _, name := range names {
		switch name {
		case kubelet.SourceName:
			client, err := kubelet.NewClient(c.Kubelet)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, kubelet.NewSource(kubelet.SourceConfig{
				Client:            client,
				Nodes:             nodes,
				Selector:          c.NodeSelector,
				Exclude:           c.KraftletSelector,
				Port:              c.KubeletPort,
				UseNodeStatusPort: c.KubeletUseNodeStatusPort,
				AddressTypes:      c.KubeletAddressTypes,
			}))
		case ukpd.SourceName:
			cfg := c.Ukpd
			cfg.Nodes, cfg.Pods = nodes, pods
			if cfg.NodeSelector == nil {
				cfg.NodeSelector = c.KraftletSelector
			}
			if cfg.Clock == nil {
				cfg.Clock = c.Clock
			}
			src, err := ukpd.NewSource(cfg)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, src)
		default:
			return nil, nil, fmt.Errorf("unknown source %q", name)
		}
	}
	return out, names, nil
}

// endpointSource is the source of pods' endpoints and node exporters of a
// parsed --pod-metrics-config: targets of the one scraper like every other.
func (c CompletedConfig) endpointSource(pods podcache.Pods) *promscrape.Source {
	promscrape.RegisterMetrics()
	// A plain transport: no proxy from the environment (pod IPs are
	// reached directly) and no credentials of any kind; https targets
	// are verified against the system roots. A pod's endpoint chooses
	// its response headers, so their size is bounded (net/http's default
	// is 1 MiB per response).
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 1
	transport.MaxResponseHeaderBytes = maxEndpointHeaderBytes
	return promscrape.NewSource(c.PodMetrics, endpointPods{pods}, promscrape.Options{
		Client: &http.Client{Transport: transport},
		Clock:  c.Clock,
	})
}

// maxEndpointHeaderBytes bounds the response headers of a pod endpoint or
// node exporter: a Prometheus endpoint sends a few short headers.
const maxEndpointHeaderBytes = 64 << 10

// endpointMetrics is what the provider needs of the configured metrics.
func endpointMetrics(cfg *promscrape.Config) []provider.EndpointMetric {
	onPools := map[string]bool{}
	for _, p := range cfg.EndpointPickers {
		for _, name := range p.Metrics {
			onPools[name] = true
		}
	}
	out := make([]provider.EndpointMetric, len(cfg.Metrics))
	for i, m := range cfg.Metrics {
		out[i] = provider.EndpointMetric{Name: m.Name, Combine: m.Combine, Members: m.Members, OnPools: onPools[m.Name], NoneWhenIdle: m.Idle == promscrape.IdleNone}
		switch m.Type {
		case promscrape.Ratio:
			out[i].Estimate = &group.Estimate{Mean: true} // numerator over denominator, as _sum over _count
		case promscrape.Histogram:
			out[i].Estimate = &group.Estimate{Mean: m.Quantile == nil}
			if m.Quantile != nil {
				out[i].Estimate.Quantile = *m.Quantile
			}
		}
	}
	return out
}

// endpointsReady is the readiness check of the pod-endpoint targets: a
// replica answers once the scraper has completed the ticks their values
// need, one for gauges and two when a metric is a counter (a rate needs two
// samples), so that a restarted replica does not serve every pod's
// endpoint values as missing. A tick counts whatever its targets gave: a
// target that keeps failing must not keep the replica unready.
func endpointsReady(cfg *promscrape.Config, s *sources.Scraper) func(*http.Request) error {
	need := int64(1)
	for _, m := range cfg.Metrics {
		if m.Type != promscrape.Gauge {
			need = 2 // a counter's rate, a histogram's or a ratio's parts'
		}
	}
	return func(*http.Request) error {
		if done := s.Ticks(); done < need {
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
