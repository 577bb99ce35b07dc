package env

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// The label kraftlet puts on its nodes (the server's default
// --kraftlet-node-selector), and the taint these tests put on such nodes so
// that only pods meant for unikernels land there.
const (
	KraftletNodeLabel  = "unikraft.com/virtual-kubelet"
	KraftletTaintKey   = "virtual-kubelet.io/provider"
	KraftletTaintValue = "unikraft"
)

const ukpdToken = "e2e-ukpd-token" // the fake accepts it, the server sends it

// Ukpd is an in-process fake ukpd: the platform API over TLS on 127.0.0.1,
// and its control API (test/fakeukpd/README.md) in plain HTTP on another
// loopback port, whose client Control is. URL, CAFile and TokenFile are
// what a client needs to reach the platform API.
type Ukpd struct {
	*fakeukpd.Running
	TokenFile string
	Control   UkpdControl
}

// UkpdPageSize is the most instances one answer of the suite's fake ukpd
// lists.
const UkpdPageSize = 100

// StartUkpd starts a fake ukpd, writing its token and CA into dir. Close it
// when done.
func StartUkpd(dir string) (*Ukpd, error) {
	tokenFile := filepath.Join(dir, "token")
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(tokenFile, []byte(ukpdToken+"\n"), 0o600)
	}
	if err != nil {
		return nil, err
	}
	// The fake's own token, not the file's, so that a test can rewrite the
	// file; and a page of at most 100 instances, whatever a list request
	// asks: the server must read the list in pages.
	r, err := fakeukpd.Start(fakeukpd.Options{Config: fakeukpd.Config{Tokens: []string{ukpdToken}, PageSize: UkpdPageSize}, CertDir: dir})
	if err != nil {
		return nil, err
	}
	return &Ukpd{Running: r, TokenFile: tokenFile, Control: UkpdControl{Address: r.ControlAddress}}, nil
}

// ServerArgs are the server flags that add the ukpd source with this fake
// as its only endpoint, owning the nodes of the default kraftlet selector.
func (u *Ukpd) ServerArgs() []string {
	return []string{
		"--sources=kubelet,ukpd",
		"--ukpd-endpoint=" + u.URL,
		"--ukpd-token-file=" + u.TokenFile,
		"--ukpd-certificate-authority=" + u.CAFile,
	}
}

// AddKraftletNode registers a kwok node as kraftlet would: labelled
// KraftletNodeLabel=true and tainted with KraftletTaintKey, so that only
// pods that tolerate it (CreateKraftletDeployment's) land there. No kubelet
// listens behind its kubelet port.
func AddKraftletNode(ctx context.Context, c *cluster.Cluster, name string) error {
	return AddKraftletNodeAt(ctx, c, name, "127.0.0.1")
}

// AddKraftletNodeAt is AddKraftletNode for a node whose InternalIP is addr,
// as kraftlet's node has its host's address.
func AddKraftletNodeAt(ctx context.Context, c *cluster.Cluster, name, addr string) error {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return err
	}
	node := cluster.NodeObject(name, map[string]string{KraftletNodeLabel: "true"}, addr, ports[0])
	node.Spec.Taints = []corev1.Taint{{Key: KraftletTaintKey, Value: KraftletTaintValue, Effect: corev1.TaintEffectNoSchedule}}
	return c.CreateNode(ctx, node)
}

// CreateKraftletDeployment creates a Deployment like CreateDeployment whose
// pods run on kraftlet nodes: they select their label and tolerate their
// taint.
func CreateKraftletDeployment(ctx context.Context, client kubernetes.Interface, d DeploymentSpec) error {
	return createDeployment(ctx, client, d, "unikraft.org/nginx:latest", map[string]string{KraftletNodeLabel: "true"}, corev1.Toleration{
		Key: KraftletTaintKey, Operator: corev1.TolerationOpEqual, Value: KraftletTaintValue, Effect: corev1.TaintEffectNoSchedule,
	})
}

// UkpdUsage is what one instance (one container) reports, as quantities:
// CPU in cores ("250m"), Memory the resident set ("64Mi").
type UkpdUsage struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// UkpdControl is a client of a fake ukpd's control API at Address (host:port).
type UkpdControl struct{ Address string }

// AddInstance adds a running instance for a pod's container.
func (c UkpdControl) AddInstance(ctx context.Context, namespace, pod, container, node string, u UkpdUsage) error {
	body := struct {
		fakeukpd.InstanceSpec
		UkpdUsage
	}{fakeukpd.InstanceSpec{Namespace: namespace, Pod: pod, Container: container, Node: node}, u}
	return fakecore.Control{Address: c.Address}.Do(ctx, http.MethodPost, "/v1/instances", body, nil, http.StatusCreated)
}

// podCall sends method to the pod's path under /v1/namespaces, with suffix
// ("/usage", an op such as "/standby" or "/restart", or "").
func (c UkpdControl) podCall(ctx context.Context, method, namespace, pod, suffix string, body any, okCodes ...int) error {
	return fakecore.Control{Address: c.Address}.Do(ctx, method, "/v1/namespaces/"+namespace+"/pods/"+pod+suffix, body, nil, okCodes...)
}

// RemovePod removes every instance of a pod; a pod without any is not an
// error.
func (c UkpdControl) RemovePod(ctx context.Context, namespace, pod string) error {
	return c.podCall(ctx, http.MethodDelete, namespace, pod, "", nil, http.StatusOK, http.StatusNotFound)
}

// InstanceSync plays kraftlet's part for one node: it keeps one fake ukpd
// instance per container of every Running pod bound to the node, tagged with
// the pod's namespace, name, container and the node, and removes them when
// the pod stops running or goes away.
type InstanceSync struct {
	control UkpdControl
	node    string
	// mu serialises instance changes with SetUsage, so a pod added while
	// the usage changes gets the new usage.
	mu      sync.Mutex
	usage   map[string]UkpdUsage   // by namespace
	standby map[string]bool        // by namespace
	pods    map[string]*corev1.Pod // by namespace/name, those with instances
	lastErr error
}

// SyncInstances follows the pods bound to node and keeps their instances in
// the fake ukpd behind control, with usage u until SetUsage says otherwise.
// It returns once the informer has synced; the sync stops when ctx ends.
// Failed control calls are retried on the informer's next resync.
func SyncInstances(ctx context.Context, client kubernetes.Interface, node string, control UkpdControl, u UkpdUsage) (*InstanceSync, error) {
	s := &InstanceSync{control: control, node: node, usage: map[string]UkpdUsage{"": u}, standby: map[string]bool{}, pods: map[string]*corev1.Pod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, time.Second,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observe(ctx, obj, false) },
		UpdateFunc: func(_, obj any) { s.observe(ctx, obj, false) },
		DeleteFunc: func(obj any) { s.observe(ctx, obj, true) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("sync %v informer for node %s: %w", typ, node, ctx.Err())
		}
	}
	return s, nil
}

// SetUsage sets the usage of every instance of the pods of namespace, now
// and for pods added later.
func (s *InstanceSync) SetUsage(ctx context.Context, namespace string, u UkpdUsage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage[namespace] = u
	return s.forPods(namespace, func(pod string) error {
		return s.control.podCall(ctx, http.MethodPut, namespace, pod, "/usage", u, http.StatusOK)
	})
}

// SetStandby puts the instances of the pods of namespace in standby, now and
// for pods added later, or wakes them all.
func (s *InstanceSync) SetStandby(ctx context.Context, namespace string, standby bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.standby[namespace] = standby
	op := "/restart"
	if standby {
		op = "/standby"
	}
	return s.forPods(namespace, func(pod string) error {
		return s.control.podCall(ctx, http.MethodPost, namespace, pod, op, nil, http.StatusOK)
	})
}

// forPods calls call for every pod of namespace with instances; s.mu must
// be held.
func (s *InstanceSync) forPods(namespace string, call func(pod string) error) error {
	var errs []error
	for _, p := range s.pods {
		if p.Namespace == namespace {
			errs = append(errs, call(p.Name))
		}
	}
	return errors.Join(errs...)
}

// Err returns the last failed control call, if any.
func (s *InstanceSync) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func (s *InstanceSync) observe(ctx context.Context, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	have := s.pods[key]
	if deleted && have != nil && have.UID != p.UID {
		return // an earlier pod of the same name
	}
	running := !deleted && p.Spec.NodeName == s.node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
	if have != nil && (!running || have.UID != p.UID) {
		if err := s.control.RemovePod(ctx, p.Namespace, p.Name); err != nil {
			s.lastErr = err
			return
		}
		delete(s.pods, key)
		have = nil
	}
	if !running || have != nil {
		return
	}
	u, ok := s.usage[p.Namespace]
	if !ok {
		u = s.usage[""]
	}
	var err error
	for i := 0; i < len(p.Spec.Containers) && err == nil; i++ {
		err = s.control.AddInstance(ctx, p.Namespace, p.Name, p.Spec.Containers[i].Name, s.node, u)
	}
	if err == nil && s.standby[p.Namespace] {
		err = s.control.podCall(ctx, http.MethodPost, p.Namespace, p.Name, "/standby", nil, http.StatusOK)
	}
	if err != nil {
		s.lastErr = err
		// Start over on the next resync rather than leave half a pod.
		_ = s.control.RemovePod(ctx, p.Namespace, p.Name)
		return
	}
	s.pods[key] = p
}
