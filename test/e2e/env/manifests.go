package env

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/group-metrics-server/group-metrics-server/test/chart"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// Render returns the objects of the kustomization in dir, as rendered by
// `kubectl kustomize`, in order.
func Render(ctx context.Context, c *cluster.Cluster, dir string) ([]*unstructured.Unstructured, error) {
	out, _, err := c.Kubectl(ctx, "kustomize", dir)
	if err != nil {
		return nil, err
	}
	return chart.Decode(strings.NewReader(out))
}

// Apply writes objs as one List under <workdir>/manifests/<name>.json and
// applies it with kubectl, server-side, as a user applying manifests would;
// flags are added to kubectl apply's (--force-conflicts, or
// --server-side=false for a client-side apply).
func Apply(ctx context.Context, c *cluster.Cluster, name string, objs []*unstructured.Unstructured, flags ...string) error {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		items = append(items, o.Object)
	}
	data, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(c.WorkDir(), "manifests", name+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	args := append([]string{"apply", "--server-side", "--field-manager=gms-e2e"}, flags...)
	_, _, err = c.Kubectl(ctx, append(args, "-f", path)...)
	return err
}

// find returns the object of kind named name in objs, or with name "" the
// only object of kind.
func find(objs []*unstructured.Unstructured, kind, name string) (*unstructured.Unstructured, error) {
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			if found != nil {
				return nil, fmt.Errorf("manifests hold more than one %s", kind)
			}
			found = o
		}
	}
	if found == nil {
		return nil, fmt.Errorf("manifests hold no %s %s", kind, name)
	}
	return found, nil
}

// container returns the container named name of a Deployment's pod
// template, and the template's pod spec; the pod runs as the spec's
// ServiceAccountName or, if that is empty, default.
func container(deploy *unstructured.Unstructured, name string) (*corev1.Container, *corev1.PodSpec, error) {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deploy.Object, &d); err != nil {
		return nil, nil, fmt.Errorf("deployment %s: %w", deploy.GetName(), err)
	}
	spec := &d.Spec.Template.Spec
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i], spec, nil
		}
	}
	return nil, nil, fmt.Errorf("deployment %s has no container %s", deploy.GetName(), name)
}
