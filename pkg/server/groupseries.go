package server

import (
	"sync"
	"sync/atomic"

	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
)

// groupSeries is the one group-series collector of the process: the legacy
// registry takes a collector once, and the newest server built with
// GroupMetricsSeries feeds it.
var groupSeries struct {
	once    sync.Once
	current atomic.Pointer[provider.Provider]
}

// exposeGroupSeries makes /metrics serve p's LeaderWorkerSet group series.
func exposeGroupSeries(p *provider.Provider) {
	groupSeries.current.Store(p)
	groupSeries.once.Do(func() {
		legacyregistry.CustomMustRegister(provider.NewGroupSeriesCollector(func() []provider.GroupSample {
			if cur := groupSeries.current.Load(); cur != nil {
				return cur.GroupSamples()
			}
			return nil
		}))
	})
}

// endpointSeries is the one pod-endpoint group-series collector of the
// process, fed by the newest server built with both GroupMetricsSeries
// and PodMetrics.
var endpointSeries struct {
	once    sync.Once
	current atomic.Pointer[provider.CustomMetrics]
}

// exposeEndpointSeries makes /metrics serve the groups' pod-endpoint
// values of cm (group_metrics_server_lws_group_endpoint_value).
func exposeEndpointSeries(cm *provider.CustomMetrics) {
	endpointSeries.current.Store(cm)
	endpointSeries.once.Do(func() {
		legacyregistry.CustomMustRegister(provider.NewEndpointGroupSeriesCollector(func() []provider.EndpointGroupSample {
			if cur := endpointSeries.current.Load(); cur != nil {
				return cur.EndpointGroupSamples()
			}
			return nil
		}))
	})
}

// servingCert is the one serving-certificate collector of the process, fed
// by the newest server built with a serving certificate.
var servingCert struct {
	once    sync.Once
	current atomic.Pointer[certs.ServingCert]
}

// exposeServingCert makes /metrics serve the expiry of the certificate the
// server presents (group_metrics_server_serving_cert_not_after_timestamp_seconds),
// which the expiry alerts of the monitoring kit read.
func exposeServingCert(cert certs.ServingCert) {
	servingCert.current.Store(&cert)
	servingCert.once.Do(func() {
		legacyregistry.CustomMustRegister(certs.NewServingCertCollector(currentServingCert{}))
	})
}

// currentServingCert is the certificate of the newest server.
type currentServingCert struct{}

func (currentServingCert) CurrentCertKeyContent() (cert, key []byte) {
	if cur := servingCert.current.Load(); cur != nil {
		return (*cur).CurrentCertKeyContent()
	}
	return nil, nil
}
