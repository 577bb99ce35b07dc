package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Stop stops the node and leaves nothing of it running or mounted: the
// kubelet first, so that nothing starts containers again; then every
// container and sandbox, through ctr; containerd; then what CleanUpRealNode
// removes: the runtime shims containerd started for this node (they run in
// process groups of their own and outlive containerd by design) and their
// sockets, whatever runc still knows, every mount under the node's
// directory, the node's bridge and the kubelet's links to the pod logs in
// /var/log/containers. The node's directory stays, with the logs. Stop
// deletes the Node object too, so the cluster does not keep a NotReady
// node. It is safe to call more than once.
func (n *RealNode) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.Stop())
	}
	if n.containerd != nil && !n.containerd.exited() {
		errs = append(errs, n.removeContainers(ctx))
		errs = append(errs, n.containerd.Stop())
	}
	// What is left, it removes as for a node whose RealNode died: the
	// shims and their sockets, when containerd died first, say.
	_, err := cleanUpNode(ctx, n.dirs, n.bridge)
	errs = append(errs, err)
	// A cluster that is stopping (its context ended: an interrupt, say) has
	// no kube-apiserver to delete the Node from, nor a need to.
	n.c.mu.Lock()
	stopping := n.c.stopping
	n.c.mu.Unlock()
	if !stopping {
		if err := n.c.client.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete node %s: %w", n.name, err))
		}
	}
	return errors.Join(errs...)
}

// removeContainers kills and deletes every container of the CRI namespace,
// sandboxes included, with their tasks and snapshots.
func (n *RealNode) removeContainers(ctx context.Context) error {
	out, err := n.Ctr(ctx, "containers", "list", "-q")
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range strings.Fields(out) {
		// A container without a task has nothing to kill.
		_, _ = n.Ctr(ctx, "tasks", "kill", "--all", "--signal=SIGKILL", id)
		if err := pollTaskGone(ctx, n, id); err != nil {
			errs = append(errs, err)
		}
		if _, err := n.Ctr(ctx, "containers", "delete", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pollTaskGone deletes the task of container id once its processes have
// exited after SIGKILL.
func pollTaskGone(ctx context.Context, n *RealNode, id string) error {
	return PollUntil(ctx, "the task of container "+id+" to exit", 100*time.Millisecond, 10*time.Second, nil, func(ctx context.Context) error {
		out, err := n.Ctr(ctx, "tasks", "delete", "--force", id)
		if err == nil || strings.Contains(out, "not found") {
			return nil
		}
		return err
	})
}
