// Package ukpd reads CPU and memory of the pods that kraftlet runs as
// Unikraft instances from ukpd, the Unikraft platform daemon, through its
// platform API (GET /v1/instances and GET /v1/instances/metrics).
//
// An instance belongs to the pod and container its kraftlet tags name
// (TagNamespace, TagPod, TagContainer), on the node of TagNode. ukpd gives
// no sample timestamps: spans are measured by ukpd's uptime or by the time
// between arrivals, never by ukpd's clock against the source's (see
// timeline). Running instances report their usage, instances in standby
// (scaled to zero) zero CPU, draining and stopping ones their last usage
// until it is stale. docs/ukpd.md has the details.
//
// The Prometheus text form is read by a decoder of this package rather
// than by github.com/prometheus/common/expfmt: expfmt checks each label of
// a line against all before it, so one line of 100,000 labels costs it
// minutes and hundreds of gigabytes of allocation, while this decoder is
// linear in the body and bounds every line (docs/benchmarks.md has both
// sets of figures). The pod-endpoint source's approach, a line filter by
// family and then expfmt, does not help here: the series this source reads
// are nearly all of ukpd's answer, and a hostile line is one of them. On
// 2,000 instances in the documented form (BenchmarkDecodeMetricsTextTypical,
// 2026-12-03, medians of 3) the decoder took 4.4 ms and 1.6 MB, expfmt 15.1
// ms and 5.4 MB, filter then expfmt 18.8 ms and 8.6 MB; with as many lines
// again of a family not read, 6.9 ms against 16.1 ms. Every malformed line
// is also named and left out alone, where expfmt stops at the first.
// FuzzDecodeMetricsTextMatchesExpfmt checks that the two read the same
// samples from every body expfmt accepts.
package ukpd

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// SourceName is the ukpd source's name in flags, self-metrics and logs.
const SourceName = "ukpd"

// The label kraftlet puts on its nodes.
const (
	kraftletNodeLabel = "unikraft.com/virtual-kubelet"
	kraftletNodeValue = "true"
)

// DefaultNodeSelector selects the nodes kraftlet registers.
const DefaultNodeSelector = kraftletNodeLabel + "=" + kraftletNodeValue

// DefaultListRefresh is how long an instance list is used before it is
// fetched again, when no unknown instance forces it earlier.
const DefaultListRefresh = time.Minute

// SourceConfig configures the ukpd source.
type SourceConfig struct {
	Endpoints []EndpointConfig
	// Nodes resolves the node selectors of endpoints.
	Nodes podcache.Nodes
	// Pods resolves instance tags to pods.
	Pods podcache.Pods
	// NodeSelector picks the nodes of endpoints that name neither nodes nor
	// a selector; nil means DefaultNodeSelector.
	NodeSelector labels.Selector
	// TokenFile, CAFile, InsecureSkipTLSVerify and MetricsFormat apply to
	// every endpoint that does not set its own (see ClientConfig).
	TokenFile             string
	CAFile                string
	InsecureSkipTLSVerify bool
	MetricsFormat         Format
	// MaxResponseBytes caps each response; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// ListRefresh is the longest an instance list is used; 0 means
	// DefaultListRefresh.
	ListRefresh time.Duration
	// RequiredTags are tags (key=value, see ParseRequiredTag) that an
	// instance must carry to be attributed; others are left out as
	// missing_required_tag. They tell a cluster's instances from those of
	// other clusters in the same account.
	RequiredTags []string
	// Relays turns on the per-host topology: a target per kraftlet node
	// that no endpoint owns, at a relay on the node's address (see
	// RelayConfig). Port 0 leaves it off.
	Relays RelayConfig
	// Clock stamps samples; nil means the real clock.
	Clock clock.PassiveClock
}

// Source yields one target per configured endpoint, and with relays one per
// kraftlet node no endpoint owns. Targets must be called
// from one goroutine at a time; the targets it returns are safe for
// concurrent use.
type Source struct {
	endpoints    []*endpoint
	relays       *relays // nil without relays
	nodes        podcache.Nodes
	nodeSelector labels.Selector
	// lastConflict is the node overlap logged last, so that a lasting
	// misconfiguration is logged once.
	lastConflict string
}

var _ sources.Source = &Source{}

// NewSource builds a client for every endpoint. It fails on an endpoint
// whose settings do not make a client (bad URL, unreadable CA file), or on a
// set of endpoints ValidateEndpoints rejects.
func NewSource(cfg SourceConfig) (*Source, error) {
	if cfg.Pods == nil {
		return nil, errors.New("ukpd source: no pod lister")
	}
	if errs := ValidateEndpoints(cfg.Endpoints); len(errs) > 0 {
		return nil, fmt.Errorf("ukpd source: %w", errors.Join(errs...))
	}
	if cfg.NodeSelector == nil {
		cfg.NodeSelector = labels.SelectorFromSet(labels.Set{kraftletNodeLabel: kraftletNodeValue})
	}
	for _, tag := range cfg.RequiredTags {
		if _, err := ParseRequiredTag(tag); err != nil {
			return nil, fmt.Errorf("ukpd source: %w", err)
		}
	}
	if cfg.ListRefresh <= 0 {
		cfg.ListRefresh = DefaultListRefresh
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Source{nodes: cfg.Nodes, nodeSelector: cfg.NodeSelector}
	for _, ep := range cfg.Endpoints {
		if cfg.Nodes == nil && len(ep.Nodes) == 0 {
			return nil, fmt.Errorf("ukpd source: endpoint %s selects nodes but there is no node lister", ep.URL)
		}
		client, err := NewClient(ClientConfig{
			URL:                   ep.URL,
			TokenFile:             cmp.Or(ep.TokenFile, cfg.TokenFile),
			CAFile:                cmp.Or(ep.CAFile, cfg.CAFile),
			InsecureSkipTLSVerify: ep.InsecureSkipTLSVerify || cfg.InsecureSkipTLSVerify,
			MetricsFormat:         cmp.Or(ep.MetricsFormat, cfg.MetricsFormat),
			MaxResponseBytes:      cfg.MaxResponseBytes,
		})
		if err != nil {
			return nil, err
		}
		s.endpoints = append(s.endpoints, newEndpoint(ep, client, cfg.Pods, cfg.Clock, cfg.ListRefresh, cfg.RequiredTags))
	}
	if cfg.Relays.Port != 0 {
		if cfg.Nodes == nil {
			return nil, errors.New("ukpd source: relays need a node lister")
		}
		clientCfg := ClientConfig{MetricsFormat: cfg.MetricsFormat, MaxResponseBytes: cfg.MaxResponseBytes}
		r, err := newRelays(cfg.Relays, clientCfg, func(ep EndpointConfig, c *Client) *endpoint {
			return newEndpoint(ep, c, cfg.Pods, cfg.Clock, cfg.ListRefresh, cfg.RequiredTags)
		})
		if err != nil {
			return nil, err
		}
		s.relays = r
	}
	return s, nil
}

// Name implements sources.Source.
func (s *Source) Name() string { return SourceName }

// Targets implements sources.Source. A node claimed by several endpoints
// belongs to the first; an endpoint left without nodes is not scraped.
func (s *Source) Targets() ([]sources.Target, error) {
	targets := make([]sources.Target, 0, len(s.endpoints))
	owner := map[string]string{}
	var conflicts []string
	for _, ep := range s.endpoints {
		nodes, err := s.nodesOf(ep.cfg)
		if err != nil {
			return nil, fmt.Errorf("ukpd endpoint %s: %w", ep.cfg.URL, err)
		}
		own := make([]string, 0, len(nodes))
		for _, n := range nodes {
			if first, taken := owner[n]; taken {
				conflicts = append(conflicts, fmt.Sprintf("%s (%s, %s)", n, first, ep.cfg.URL))
				continue
			}
			owner[n] = ep.cfg.URL
			own = append(own, n)
		}
		if len(own) > 0 {
			targets = append(targets, &target{ep: ep, nodes: own})
		}
	}
	if s.relays != nil {
		targets = append(targets, s.relays.targets(s.nodes.List(s.nodeSelector), owner)...)
	}
	if c := strings.Join(conflicts, ", "); c != s.lastConflict {
		if c != "" {
			klog.ErrorS(nil, "Nodes claimed by several ukpd endpoints belong to the first", "nodes", c)
		}
		s.lastConflict = c
	}
	return targets, nil
}

func (s *Source) nodesOf(ep EndpointConfig) ([]string, error) {
	if len(ep.Nodes) > 0 {
		return ep.Nodes, nil
	}
	sel := ep.NodeSelector
	if sel == nil {
		sel = s.nodeSelector
	}
	nodes := s.nodes.List(sel)
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name) // sorted, as the cache lists them
	}
	return names, nil
}
