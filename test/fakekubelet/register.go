package fakekubelet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// NodeRegistration describes the Node objects RegisterNodes creates.
type NodeRegistration struct {
	// Labels are added to the standard kubernetes.io labels.
	Labels map[string]string
	// Capacity replaces cluster.NodeObject's, resource by resource.
	Capacity corev1.ResourceList
}

// endpointSet says whether obj has want's kubelet endpoint and InternalIP.
func endpointSet(obj, want *corev1.Node) bool {
	return obj.Status.DaemonEndpoints == want.Status.DaemonEndpoints && slices.Contains(obj.Status.Addresses, want.Status.Addresses[0])
}

// RegisterNodes creates a Node object for every node of the fleet, or, for
// one that exists, sets its address and kubelet port.
func (f *Fleet) RegisterNodes(ctx context.Context, client kubernetes.Interface, reg NodeRegistration) error {
	nodes := f.Nodes()
	errs := make([]error, len(nodes))
	workqueue.ParallelizeUntil(ctx, 16, len(nodes), func(i int) {
		errs[i] = registerNode(ctx, client, nodes[i], reg)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// registerNode creates or updates the Node of n: cluster.NodeObject with
// InternalIP 127.0.0.1, n's port as the kubelet endpoint, and reg's labels
// and capacity.
func registerNode(ctx context.Context, client kubernetes.Interface, n *Node, reg NodeRegistration) error {
	want := cluster.NodeObject(n.name, reg.Labels, "127.0.0.1", n.Port())
	maps.Copy(want.Status.Capacity, reg.Capacity)
	maps.Copy(want.Status.Allocatable, reg.Capacity)
	got, err := client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if err == nil && endpointSet(got, want) {
		return nil
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %q: %w", n.name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if endpointSet(cur, want) {
			return nil
		}
		cur.Status.Addresses, cur.Status.DaemonEndpoints = want.Status.Addresses, want.Status.DaemonEndpoints
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set endpoint of node %q: %w", n.name, err)
	}
	return nil
}
