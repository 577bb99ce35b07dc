package kubelet

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// SourceName is the kubelet source's name in flags, self-metrics and logs.
const SourceName = "kubelet"

// SourceConfig configures the kubelet source.
type SourceConfig struct {
	Client *Client
	Nodes  podcache.Nodes
	// Selector picks the nodes to scrape (--node-selector).
	Selector labels.Selector
	// Exclude drops nodes that have no kubelet stats of their own, such as
	// kraftlet nodes; nil excludes nothing.
	Exclude labels.Selector
	// Port is the kubelet port unless UseNodeStatusPort is set and the node
	// advertises one.
	Port              int
	UseNodeStatusPort bool
	// AddressTypes is the preference order of node address types.
	AddressTypes []corev1.NodeAddressType
}

// Source yields one target per selected node.
type Source struct{ cfg SourceConfig }

var _ sources.Source = &Source{}

// NewSource returns the kubelet source.
func NewSource(cfg SourceConfig) *Source {
	if cfg.Selector == nil {
		cfg.Selector = labels.Everything()
	}
	return &Source{cfg: cfg}
}

// Name implements sources.Source.
func (s *Source) Name() string { return SourceName }

// Targets implements sources.Source.
func (s *Source) Targets() ([]sources.Target, error) {
	nodes := s.cfg.Nodes.List(s.cfg.Selector)
	targets := make([]sources.Target, 0, len(nodes))
	for _, n := range nodes {
		if s.cfg.Exclude != nil && s.cfg.Exclude.Matches(labels.Set(n.Labels)) {
			continue
		}
		targets = append(targets, &target{
			client:       s.cfg.Client,
			nodes:        []string{n.Name},
			host:         s.hostPort(n),
			resourcePath: n.Annotations[podcache.ResourceMetricsPathAnnotation],
		})
	}
	return targets, nil
}

// hostPort picks the node's address by preferred type and its kubelet port;
// an empty host means the node advertises no usable address.
func (s *Source) hostPort(n *podcache.Node) string {
	port := s.cfg.Port
	if p := n.KubeletPort(); s.cfg.UseNodeStatusPort && p > 0 {
		port = p
	}
	for _, t := range s.cfg.AddressTypes {
		for _, a := range n.Addresses() {
			if a.Type == t && a.Address != "" {
				return net.JoinHostPort(a.Address, strconv.Itoa(port))
			}
		}
	}
	return ""
}

type target struct {
	client       *Client
	nodes        []string // the one node this kubelet runs on
	host         string
	resourcePath string // the node's podcache.ResourceMetricsPathAnnotation
}

func (t *target) ID() string      { return "node/" + t.nodes[0] }
func (t *target) Nodes() []string { return t.nodes }

func (t *target) Scrape(ctx context.Context) (*sources.Batch, error) {
	if t.host == "" {
		return nil, sources.WithReason(sources.ReasonConnection,
			fmt.Errorf("scrape node %q: no address of a preferred type", t.nodes[0]))
	}
	return t.client.Scrape(ctx, t.nodes[0], t.host, t.resourcePath)
}
