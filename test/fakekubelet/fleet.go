// Package fakekubelet runs a fleet of fake kubelets on 127.0.0.1 for tests
// (README.md): every Node serves GET /stats/summary and GET
// /metrics/resource over TLS from one snapshot. Sample instants are whole
// seconds, so that the second-precision timestamps of the Summary API and
// the millisecond ones of the Prometheus text name the same instant.
package fakekubelet

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// The usage of a container until a test sets one, and the defaults of
// Config's zero fields.
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

// Config configures a Fleet.
type Config struct {
	Clock  clock.Clock // sample times, CPU counters and Slow
	Tokens []string    // accepted bearer tokens
	// TokenAuthenticator, if set, is asked about tokens not in Tokens,
	// concurrently from request handlers.
	TokenAuthenticator authenticator.Token
	// ClientCAPEM holds CA certificates that client certificates may chain
	// to, besides the fleet CA.
	ClientCAPEM []byte
	// NodeBaseUsage (kubelet and runtime) is added to the sum of a node's
	// pods; NodeMemoryCapacityBytes bounds its availableBytes.
	NodeBaseUsage           Usage
	NodeMemoryCapacityBytes uint64
}

// Fleet is a set of fake kubelets sharing a CA, credentials and clock.
// All methods are safe for concurrent use.
type Fleet struct {
	cfg         Config
	tl          *timeline
	ca          *pki.CA
	clientCerts authenticator.Request // as a kubelet does, on the fleet's clock

	// mu guards the nodes, their pods and faults, and the usage rules.
	mu    sync.RWMutex
	nodes map[string]*Node
	pods  map[podKey]*Node
	rules []usageRule

	// ctx ends when Close starts; the pod informers run until it does.
	ctx  context.Context
	stop context.CancelFunc
	// lifeMu orders Close after the informers started and requests entered,
	// and guards presented, the bearer tokens of authenticated requests.
	lifeMu    sync.Mutex
	factories []informers.SharedInformerFactory
	handlers  sync.WaitGroup
	presented []string
}

// PresentedTokens returns every distinct bearer token the fleet accepted,
// in the order first seen: the credentials its scrapers sent.
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
	verify := func() (x509.VerifyOptions, bool) {
		return x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: cfg.Clock.Now()}, true
	}
	f := &Fleet{cfg: cfg, tl: newTimeline(cfg.Clock), ca: ca, nodes: map[string]*Node{}, pods: map[podKey]*Node{},
		clientCerts: x509request.NewDynamic(verify, x509request.CommonNameUserConversion)}
	f.ctx, f.stop = context.WithCancel(context.Background())
	return f, nil
}

// CACertPEM returns the CA that signs every node's serving certificate.
func (f *Fleet) CACertPEM() []byte { return f.ca.CertPEM() }

// IssueClientCertificate returns a client certificate and key every node
// accepts.
func (f *Fleet) IssueClientCertificate(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return f.ca.Issue(f.cfg.Clock.Now(), pki.Leaf{CommonName: user, Organizations: groups, Client: true})
}

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

// Close stops every listener and informer and waits for the requests in
// flight, stalled and slow ones too.
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

// PodFromObject converts a pod object into a fleet Pod.
func PodFromObject(p *corev1.Pod) Pod {
	out := Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Labels: p.Labels, StartTime: ptr.Deref(p.Status.StartTime, metav1.Time{}).Time}
	for _, c := range p.Spec.Containers {
		out.Containers = append(out.Containers, Container{Name: c.Name, MemoryLimit: c.Resources.Limits[corev1.ResourceMemory]})
	}
	return out
}

// StartPodInformer serves the Running pods bound to nodes of the fleet on
// those nodes, from when it has synced until ctx ends or the fleet closes.
func (f *Fleet) StartPodInformer(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "spec.nodeName!=,status.phase=" + string(corev1.PodRunning)
		}),
		informers.WithTransform(func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}),
	)
	reg, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.followPod(obj, false) },
		UpdateFunc: func(_, obj any) { f.followPod(obj, false) },
		DeleteFunc: func(obj any) { f.followPod(obj, true) },
	})
	if err != nil {
		return fmt.Errorf("add pod handler: %w", err)
	}
	ictx, cancel := context.WithCancel(ctx)
	context.AfterFunc(f.ctx, cancel)
	f.lifeMu.Lock()
	if f.ctx.Err() != nil {
		f.lifeMu.Unlock()
		return errors.New("fleet is closed")
	}
	factory.StartWithContext(ictx)
	f.factories = append(f.factories, factory)
	f.lifeMu.Unlock()

	// The registration has synced once the handler saw the initial list.
	if !cache.WaitForCacheSync(ictx.Done(), reg.HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", context.Cause(ictx))
	}
	return nil
}

// followPod places a Running pod bound to a node of the fleet, and removes
// one that is deleted or no longer both.
func (f *Fleet) followPod(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if _, known := f.Node(p.Spec.NodeName); deleted || !known || p.Status.Phase != corev1.PodRunning {
		f.RemovePod(p.Namespace, p.Name, string(p.UID))
	} else if err := f.SetPod(p.Spec.NodeName, PodFromObject(p)); err != nil {
		klog.V(2).InfoS("Could not place pod", "pod", klog.KObj(p), "node", p.Spec.NodeName, "err", err)
	}
}

// NewTokenReviewAuthenticator accepts the bearer tokens client's TokenReview
// API authenticates, cached for ttl by k8s.io/apiserver's token cache, as a
// kubelet's are.
func NewTokenReviewAuthenticator(client kubernetes.Interface, ttl time.Duration) authenticator.Token {
	review := func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		tr, err := client.AuthenticationV1().TokenReviews().Create(ctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("token review: %w", err)
		}
		return &authenticator.Response{}, tr.Status.Authenticated, nil
	}
	return tokencache.New(authenticator.TokenFunc(review), false, ttl, ttl)
}

// NodeRegistration describes the Node objects RegisterNodes creates.
type NodeRegistration struct {
	Labels   map[string]string   // besides the kubernetes.io ones
	Capacity corev1.ResourceList // replaces cluster.NodeObject's, resource by resource
}

// RegisterNodes creates a Node object for every node of the fleet, or sets
// the addresses and kubelet port of one that exists.
func (f *Fleet) RegisterNodes(ctx context.Context, client kubernetes.Interface, reg NodeRegistration) error {
	nodes := f.Nodes()
	errs := make([]error, len(nodes))
	workqueue.ParallelizeUntil(ctx, 16, len(nodes), func(i int) { errs[i] = registerNode(ctx, client, nodes[i], reg) })
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func registerNode(ctx context.Context, client kubernetes.Interface, n *Node, reg NodeRegistration) error {
	want := cluster.NodeObject(n.name, reg.Labels, "127.0.0.1", n.Port())
	maps.Copy(want.Status.Capacity, reg.Capacity)
	maps.Copy(want.Status.Allocatable, reg.Capacity)
	_, err := client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Addresses and endpoints always marshal.
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": want.Status.Addresses, "daemonEndpoints": want.Status.DaemonEndpoints}})
		_, err = client.CoreV1().Nodes().PatchStatus(ctx, n.name, patch)
	}
	if err != nil {
		return fmt.Errorf("register node %q: %w", n.name, err)
	}
	return nil
}
