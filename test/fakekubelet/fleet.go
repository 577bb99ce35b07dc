// Package fakekubelet runs a fleet of fake kubelets on 127.0.0.1 for tests
// (see README.md). Every Node has its own TLS listener and serves
// GET /stats/summary and GET /metrics/resource, both rendered from one
// snapshot. Sample instants are whole seconds, so that the second-precision
// timestamps of the Summary API and the millisecond timestamps of the
// Prometheus text name the same instant.
package fakekubelet

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/client-go/informers"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// The usage of every container until a test sets one, and the defaults
// NewFleet applies to zero fields of Config.
const (
	DefaultContainerCPU       = 1_000_000 // 1m, in nanocores
	DefaultContainerMemory    = 10 << 20  // 10 MiB
	DefaultNodeBaseCPU        = 100_000_000
	DefaultNodeBaseMemory     = 512 << 20
	DefaultNodeMemoryCapacity = 64 << 30
)

// Usage is a container or pod resource usage: a CPU rate in nanocores
// (1 core = 1e9) and a memory working set in bytes.
type Usage struct {
	CPUNanoCores uint64 `json:"cpuNanoCores"`
	MemoryBytes  uint64 `json:"memoryBytes"`
}

// Config configures a Fleet. Zero fields take the defaults above.
type Config struct {
	// Clock drives sample times, CPU counters and Slow faults.
	Clock clock.Clock
	// Tokens are the accepted bearer tokens.
	Tokens []string
	// TokenAuthenticator, if set, is asked about tokens not in Tokens,
	// concurrently from request handlers.
	TokenAuthenticator authenticator.Token
	// ClientCAPEM holds CA certificates, in PEM, that client certificates
	// may chain to, in addition to the fleet CA.
	ClientCAPEM []byte
	// NodeBaseUsage is added to the sum of a node's pods (kubelet and runtime).
	NodeBaseUsage Usage
	// NodeMemoryCapacityBytes bounds node availableBytes.
	NodeMemoryCapacityBytes uint64
}

// Fleet is a set of fake kubelets sharing a CA, credentials and clock.
// All methods are safe for concurrent use.
type Fleet struct {
	cfg Config
	tl  *timeline
	ca  *pki.CA
	// clientCerts verifies client certificates as a kubelet does, on the
	// fleet's clock.
	clientCerts authenticator.Request

	// mu guards the nodes, their pods and faults, and the usage rules.
	mu    sync.RWMutex
	nodes map[string]*Node
	pods  map[podKey]*Node
	rules []usageRule

	// ctx ends when Close starts; the pod informers run until it does.
	ctx  context.Context
	stop context.CancelFunc
	// lifeMu orders Close after the informers started and requests entered,
	// and guards presented.
	lifeMu    sync.Mutex
	factories []informers.SharedInformerFactory
	handlers  sync.WaitGroup
	// presented are the bearer tokens of authenticated requests, for tests
	// of what a scraper sends a kubelet.
	presented []string
}

// PresentedTokens returns every distinct bearer token the fleet has
// accepted, in the order first seen: the credentials its scrapers sent.
func (f *Fleet) PresentedTokens() []string {
	f.lifeMu.Lock()
	defer f.lifeMu.Unlock()
	return slices.Clone(f.presented)
}

func (f *Fleet) recordPresented(token string) {
	f.lifeMu.Lock()
	defer f.lifeMu.Unlock()
	if !slices.Contains(f.presented, token) {
		f.presented = append(f.presented, token)
	}
}

// NewFleet creates an empty fleet and its CA.
func NewFleet(cfg Config) (*Fleet, error) {
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.RealClock{})
	cfg.NodeBaseUsage = cmp.Or(cfg.NodeBaseUsage, Usage{CPUNanoCores: DefaultNodeBaseCPU, MemoryBytes: DefaultNodeBaseMemory})
	cfg.NodeMemoryCapacityBytes = cmp.Or(cfg.NodeMemoryCapacityBytes, DefaultNodeMemoryCapacity)
	cfg.Tokens = slices.Clone(cfg.Tokens)
	ca, err := pki.NewCA(fmt.Sprintf("fake-kubelet-ca@%d", cfg.Clock.Now().Unix()), cfg.Clock.Now(), fakecore.CAValidity)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	if len(cfg.ClientCAPEM) > 0 && !pool.AppendCertsFromPEM(cfg.ClientCAPEM) {
		return nil, errors.New("client CA PEM holds no certificate")
	}
	f := &Fleet{
		cfg: cfg,
		tl:  newTimeline(cfg.Clock),
		ca:  ca,
		clientCerts: x509request.NewDynamic(func() (x509.VerifyOptions, bool) {
			return x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: cfg.Clock.Now()}, true
		}, x509request.CommonNameUserConversion),
		nodes: map[string]*Node{},
		pods:  map[podKey]*Node{},
	}
	f.ctx, f.stop = context.WithCancel(context.Background())
	return f, nil
}

// CACertPEM returns the PEM of the CA that signs every node's serving
// certificate (what --kubelet-certificate-authority should point at).
func (f *Fleet) CACertPEM() []byte { return f.ca.CertPEM() }

// IssueClientCertificate returns a client certificate and key, in PEM, signed
// by the fleet CA, which every node accepts.
func (f *Fleet) IssueClientCertificate(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return f.ca.Issue(f.cfg.Clock.Now(), pki.Leaf{CommonName: user, Organizations: groups, Client: true})
}

// Node returns the node with the given name.
func (f *Fleet) Node(nodeName string) (*Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.nodes[nodeName]
	return n, ok
}

// Nodes returns all nodes sorted by name.
func (f *Fleet) Nodes() []*Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.nodesLocked()
}

func (f *Fleet) nodesLocked() []*Node {
	return slices.SortedFunc(maps.Values(f.nodes), func(a, b *Node) int { return strings.Compare(a.name, b.name) })
}

// Close stops every listener and informer and waits for in-flight requests,
// including stalled and slow ones, to return.
func (f *Fleet) Close() error {
	f.lifeMu.Lock()
	if f.ctx.Err() != nil {
		f.lifeMu.Unlock()
		return nil
	}
	f.stop()
	f.lifeMu.Unlock()
	for _, fac := range f.factories {
		fac.Shutdown()
	}
	var errs []error
	for _, n := range f.Nodes() {
		n.opMu.Lock()
		errs = append(errs, n.ep.Close())
		n.opMu.Unlock()
	}
	f.handlers.Wait()
	return errors.Join(errs...)
}
