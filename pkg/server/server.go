// Package server wires the parts together: informers, sources, the scrape
// loop, the store, the provider and the API server.
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/apiserver"
	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/probe"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// Config is everything the server needs, with clients already built.
type Config struct {
	// API has secure serving, authentication and authorization applied.
	API  *genericapiserver.RecommendedConfig
	Kube kubernetes.Interface
	// Metadata watches the metadata of LeaderWorkerSet StatefulSets, which
	// the pod cache verifies group membership against.
	Metadata metadata.Interface
	// Dynamic watches InferencePools and LeaderWorkerSets, to serve an
	// endpoint picker's metrics on the LeaderWorkerSets its pool fronts;
	// only with PodMetrics naming endpoint pickers. Nil for none.
	Dynamic dynamic.Interface

	Kubelet                  kubelet.ClientConfig
	KubeletPort              int
	KubeletUseNodeStatusPort bool
	KubeletAddressTypes      []corev1.NodeAddressType
	NodeSelector             labels.Selector
	// KraftletSelector picks nodes that have no kubelet stats of their own;
	// the kubelet source leaves them to ukpd.
	KraftletSelector labels.Selector

	// Sources names the sources to run, in the order a pod reported by
	// several is looked up; default kubelet only.
	Sources []string
	// Ukpd configures the ukpd source when Sources names it; its listers
	// are filled in by New.
	Ukpd ukpd.SourceConfig

	// DefaultGroupPolicy applies to LeaderWorkerSet leaders without a
	// policy annotation.
	DefaultGroupPolicy group.Policy
	// Readiness is the HPA's readiness rule, applied to group members.
	Readiness group.Readiness
	// CustomMetrics serves group metrics on custom.metrics.k8s.io.
	CustomMetrics bool
	// GroupMetricsSeries serves every LeaderWorkerSet group's usage,
	// utilization and member counts as series on /metrics.
	GroupMetricsSeries bool
	// PodMetrics, when set (a configuration from promscrape.Parse), runs
	// the pod-endpoint source and serves its metrics on
	// custom.metrics.k8s.io.
	PodMetrics *promscrape.Config

	Resolution  time.Duration
	Timeout     time.Duration
	Concurrency int
	// Reads bounds the metrics API requests served at once.
	Reads apiserver.ReadLimit

	Clock clock.WithTicker
}

type completedConfig struct{ Config }

// CompletedConfig can only be made by Complete.
type CompletedConfig struct{ *completedConfig }

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	cc := *c
	if cc.Clock == nil {
		cc.Clock = clock.RealClock{}
	}
	if cc.NodeSelector == nil {
		cc.NodeSelector = labels.Everything()
	}
	return CompletedConfig{&completedConfig{cc}}
}

// Server is the whole group-metrics-server.
type Server struct {
	api   *genericapiserver.GenericAPIServer
	cache *podcache.Cache
	// pools maps InferencePools to LeaderWorkerSets; nil without endpoint
	// pickers.
	pools   *podcache.Pools
	scraper *sources.Scraper
	// endpoints scrapes the pod endpoints; nil without PodMetrics.
	endpoints *sources.Scraper
}

// New builds the server; nothing runs until Run.
func (c CompletedConfig) New() (*Server, error) {
	if c.Timeout >= c.Resolution {
		return nil, fmt.Errorf("scrape timeout %s must be below the resolution %s", c.Timeout, c.Resolution)
	}
	sources.RegisterMetrics()
	ukpd.RegisterMetrics()
	store.RegisterMetrics()
	provider.RegisterMetrics()
	apiserver.RegisterMetrics()

	pc, err := podcache.New(c.Kube, c.Metadata)
	if err != nil {
		return nil, err
	}
	srcs, names, err := c.sources(pc.Nodes(), pc.Pods())
	if err != nil {
		return nil, err
	}
	if c.PodMetrics != nil {
		names = append(names, promscrape.SourceName)
	}
	st := store.New(store.Config{
		Clock:          c.Clock,
		Sources:        names,
		FirstWindowMax: 2 * c.Resolution,
		MinWindow:      store.MinWindow(c.Resolution),
		StaleAfter:     2*c.Resolution + c.Timeout,
	})
	scraping := sources.ScraperConfig{
		Sink:        st,
		Clock:       c.Clock,
		Resolution:  c.Resolution,
		Timeout:     c.Timeout,
		Concurrency: c.Concurrency,
	}
	usage := scraping
	usage.Sources = srcs
	// A pod that starts is scraped as soon as its first sample can yield
	// a rate, rather than at the next tick.
	usage.EarlyDelay = store.MinWindow(c.Resolution) + time.Second
	scraper := sources.NewScraper(usage)
	// The pod endpoints and node exporters run on a scraper of their own:
	// the same code, store, health model, log-once rule and overrun
	// escape, but their own workers and ticks, so that tenants' endpoints,
	// however many or slow, never delay a kubelet's or ukpd's scrape, nor
	// the ticks that keep usage fresh. A tick of theirs that runs long
	// makes only their values stale; no liveness check watches it, or a
	// tenant could have the server restarted.
	var endpoints *sources.Scraper
	if c.PodMetrics != nil {
		named := scraping
		named.Sources = []sources.Source{c.endpointSource(pc.Pods())}
		named.Series, named.Secondary = st, true
		endpoints = sources.NewScraper(named)
	}
	if err := pc.OnPodStarted(scraper.Soon); err != nil {
		return nil, err
	}
	p := provider.New(provider.Config{
		Pods:          pc.Pods(),
		Nodes:         pc.Nodes(),
		Usage:         st,
		Clock:         c.Clock,
		Groups:        true,
		DefaultPolicy: c.DefaultGroupPolicy,
		Readiness:     c.Readiness,
	})

	liveBound := 2*c.Resolution + c.Timeout
	started := c.Clock.Now()
	gate := &startupGate{scraper: scraper, store: st}
	c.API.AddReadyzChecks(probe.Logged("metric-storage-ready", func(*http.Request) error {
		if err := gate.check(); err != nil {
			return err
		}
		if st.HasFreshUsage() {
			return nil
		}
		if st.HasFreshData() {
			return errors.New("scraped, but no node or pod has usage yet: most need a second sample")
		}
		return notReadyReason(scraper, liveBound)
	}), probe.Logged("authentication-ready", authenticationReady(c.API)))
	c.API.AddLivezChecks(probe.Logged("metric-collection-timely", func(*http.Request) error {
		last := scraper.LastTick()
		if last.IsZero() {
			last = started
		}
		if age := c.Clock.Since(last); age > liveBound {
			return fmt.Errorf("last scrape tick finished %s ago, more than %s", age.Round(time.Second), liveBound)
		}
		return nil
	}))

	if c.PodMetrics != nil {
		c.API.AddReadyzChecks(probe.Logged("pod-endpoints-collected", endpointsReady(c.PodMetrics, endpoints)))
	}
	apiCfg := apiserver.Config{Generic: c.API, Pods: p, Nodes: p, Reads: c.Reads}
	var pools *podcache.Pools
	if c.CustomMetrics {
		cm := p.CustomMetrics()
		if c.PodMetrics != nil {
			cm = cm.WithEndpoints(st, endpointMetrics(c.PodMetrics), c.Resolution)
			if len(c.PodMetrics.EndpointPickers) > 0 && c.Dynamic != nil {
				if pools, err = podcache.NewPools(c.Dynamic); err != nil {
					return nil, err
				}
				cm = cm.WithPools(pools)
			}
			if c.GroupMetricsSeries {
				exposeEndpointSeries(cm)
			}
		}
		apiCfg.CustomMetrics = cm
	}
	if c.GroupMetricsSeries {
		exposeGroupSeries(p)
	}
	if c.API.SecureServing != nil && c.API.SecureServing.Cert != nil {
		exposeServingCert(c.API.SecureServing.Cert)
	}
	api, err := apiCfg.Complete().New()
	if err != nil {
		return nil, err
	}
	return &Server{api: api, cache: pc, pools: pools, scraper: scraper, endpoints: endpoints}, nil
}

func notReadyReason(s *sources.Scraper, bound time.Duration) error {
	failing := s.TargetErrors()
	if len(failing) == 0 {
		if s.LastTick().IsZero() {
			return errors.New("no scrape has finished yet")
		}
		return fmt.Errorf("no target was scraped successfully in the last %s", bound)
	}
	ids := make([]string, 0, len(failing))
	for id, reason := range failing {
		ids = append(ids, id+": "+reason)
	}
	sort.Strings(ids)
	if len(ids) > 5 {
		ids = append(ids[:5], fmt.Sprintf("and %d more", len(failing)-5))
	}
	return fmt.Errorf("no target was scraped successfully in the last %s; failing: %s", bound, strings.Join(ids, ", "))
}

// authenticationReady fails until the client CAs the server authenticates
// with are loaded. They come from a ConfigMap in kube-system, a moment after
// the server starts listening; until then a client certificate, and the
// aggregator's proxied requests, would be taken for anonymous and refused.
func authenticationReady(api *genericapiserver.RecommendedConfig) func(*http.Request) error {
	type named struct {
		what string
		ca   dynamiccertificates.CAContentProvider
	}
	var cas []named
	if api.SecureServing != nil && api.SecureServing.ClientCA != nil {
		cas = append(cas, named{"client CA", api.SecureServing.ClientCA})
	}
	if rh := api.Authentication.RequestHeaderConfig; rh != nil && rh.CAContentProvider != nil {
		cas = append(cas, named{"request-header (front proxy) CA", rh.CAContentProvider})
	}
	return func(*http.Request) error {
		for _, c := range cas {
			if len(c.ca.CurrentCABundleContent()) == 0 {
				return fmt.Errorf("the %s is not loaded yet", c.what)
			}
		}
		return nil
	}
}

// Run starts everything and blocks until ctx is done and the API server has
// drained.
func (s *Server) Run(ctx context.Context) error {
	defer s.cache.Shutdown()
	if err := s.cache.Start(ctx); err != nil {
		return err
	}
	if s.pools != nil {
		// Not waited for: a cluster without the InferencePool CRD serves
		// the pools' metrics on the pools alone.
		s.pools.Start(ctx.Done())
	}
	klog.InfoS("Caches synced; starting the scrape loop")
	go s.scraper.Run(ctx)
	if s.endpoints != nil {
		go s.endpoints.Run(ctx)
	}
	return s.api.PrepareRun().RunWithContext(ctx)
}
