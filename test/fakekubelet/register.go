package fakekubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// RegisterNodes creates a Node object for every node of the fleet, or, for
// one that exists, sets its addresses and kubelet port with a strategic
// merge patch of its status.
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
	_, err := client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var patch []byte
		patch, err = json.Marshal(map[string]any{"status": map[string]any{"addresses": want.Status.Addresses, "daemonEndpoints": want.Status.DaemonEndpoints}})
		if err == nil {
			_, err = client.CoreV1().Nodes().PatchStatus(ctx, n.name, patch)
		}
	}
	if err != nil {
		return fmt.Errorf("register node %q: %w", n.name, err)
	}
	return nil
}
