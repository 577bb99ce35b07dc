package fakekubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// PodFromObject converts a pod object into a fleet Pod: its UID, labels,
// spec containers (with memory limits) and start time.
func PodFromObject(p *corev1.Pod) Pod {
	out := Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Labels: p.Labels, StartTime: ptr.Deref(p.Status.StartTime, metav1.Time{}).Time}
	for _, c := range p.Spec.Containers {
		out.Containers = append(out.Containers, Container{Name: c.Name, MemoryLimit: c.Resources.Limits[corev1.ResourceMemory]})
	}
	return out
}

// StartPodInformer follows Running pods bound to nodes of the fleet and
// serves them on those nodes. It returns once the informer has synced; the
// informer stops when ctx ends or the fleet closes.
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
// the incarnation of a pod that is deleted or no longer both.
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

// NewTokenReviewAuthenticator returns an authenticator that accepts the
// bearer tokens the TokenReview API of client authenticates, its answers
// cached for ttl by k8s.io/apiserver's token cache, as a kubelet's are.
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
	// Labels are added to the standard kubernetes.io labels.
	Labels map[string]string
	// Capacity replaces cluster.NodeObject's, resource by resource.
	Capacity corev1.ResourceList
}

// RegisterNodes creates a Node object for every node of the fleet, or, for
// one that exists, sets its addresses and kubelet port with a strategic
// merge patch of its status.
func (f *Fleet) RegisterNodes(ctx context.Context, client kubernetes.Interface, reg NodeRegistration) error {
	nodes := f.Nodes()
	errs := make([]error, len(nodes))
	workqueue.ParallelizeUntil(ctx, 16, len(nodes), func(i int) { errs[i] = registerNode(ctx, client, nodes[i], reg) })
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// registerNode creates or updates the Node of n.
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
