package ukpd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// RelayConfig turns on the per-host topology. Self-hosted ukpd listens on
// its host's loopback only, with a token that must not leave the host, so
// each host that runs kraftlet also runs a relay (`group-metrics-server
// ukpd-relay`, pkg/ukpdrelay): it reads ukpd on loopback and serves the two
// read paths over TLS to identities the cluster authorizes to get the
// kraftlet node's stats. The source then has one target per kraftlet node
// that no configured endpoint owns, at the node's address and Port, as it
// has one per kubelet; kraftlet registers its node from the host's network
// (docs/ukpd.md says what is assumed of the node's address).
type RelayConfig struct {
	// Port is the relays' port; 0 turns relays off.
	Port int
	// REST holds the credential sent to every relay, which the relay
	// reviews with the API server (the server's own, as sent to
	// kubelets), and the TLS settings the relays' certificates are
	// verified with (TLSClientConfig.ServerName names a certificate that
	// all relays share). Host is not used.
	REST *rest.Config
	// AddressTypes is the preference order of node address types.
	AddressTypes []corev1.NodeAddressType
}

// relays are the per-node endpoints of the per-host topology, kept from
// tick to tick so that each keeps its instance list and timelines.
type relays struct {
	cfg       RelayConfig
	transport http.RoundTripper
	newEP     func(EndpointConfig, *Client) *endpoint
	clientCfg ClientConfig // every relay client's settings but URL and Transport
	byNode    map[string]*endpoint
}

func newRelays(cfg RelayConfig, clientCfg ClientConfig, newEP func(EndpointConfig, *Client) *endpoint) (*relays, error) {
	if cfg.Port <= 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("ukpd relays: port %d is not in 1-65535", cfg.Port)
	}
	if cfg.REST == nil {
		return nil, errors.New("ukpd relays: no client configuration")
	}
	rt, err := rest.TransportFor(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("ukpd relays: %w", err)
	}
	return &relays{cfg: cfg, transport: rt, newEP: newEP, clientCfg: clientCfg, byNode: map[string]*endpoint{}}, nil
}

// targets returns one target per node of nodes not in owned: the relay at
// the node's preferred address, or a target that fails saying the node has
// none. Endpoints of nodes gone, or of an address no longer the node's, are
// dropped.
func (r *relays) targets(nodes []*podcache.Node, owned map[string]string) []sources.Target {
	out := make([]sources.Target, 0, len(nodes))
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if _, taken := owned[n.Name]; taken {
			continue
		}
		seen[n.Name] = true
		host := r.hostPort(n)
		if host == "" {
			delete(r.byNode, n.Name)
			out = append(out, noAddress(n.Name))
			continue
		}
		url := "https://" + host
		ep := r.byNode[n.Name]
		if ep == nil || ep.cfg.URL != url {
			cfg := r.clientCfg
			cfg.URL, cfg.Transport = url, r.transport
			client, err := NewClient(cfg)
			if err != nil {
				// The URL is built from a validated address and port.
				out = append(out, failing{id: "ukpd/" + url, node: n.Name, err: err})
				continue
			}
			ep = r.newEP(EndpointConfig{URL: url, Nodes: []string{n.Name}}, client)
			r.byNode[n.Name] = ep
		}
		out = append(out, &target{ep: ep, nodes: []string{n.Name}})
	}
	for name := range r.byNode {
		if !seen[name] {
			delete(r.byNode, name)
		}
	}
	return out
}

func (r *relays) hostPort(n *podcache.Node) string {
	for _, t := range r.cfg.AddressTypes {
		for _, a := range n.Addresses() {
			if a.Type == t && a.Address != "" {
				return net.JoinHostPort(a.Address, strconv.Itoa(r.cfg.Port))
			}
		}
	}
	return ""
}

// failing is a target that cannot be scraped, for the reason err gives.
type failing struct {
	id, node string
	err      error
}

func noAddress(node string) failing {
	return failing{id: "ukpd/relay/" + node, node: node, err: sources.WithReason(sources.ReasonConnection,
		fmt.Errorf("ukpd relay of node %q: no address of a preferred type", node))}
}

func (f failing) ID() string      { return f.id }
func (f failing) Nodes() []string { return []string{f.node} }
func (f failing) Scrape(_ context.Context) (*sources.Batch, error) {
	return nil, f.err
}
