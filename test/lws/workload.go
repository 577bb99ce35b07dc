package lws

import (
	"context"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// GroupVersionResource is the LeaderWorkerSet resource.
var GroupVersionResource = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}

// Labels the controller puts on every pod of a LeaderWorkerSet.
const (
	// NameLabel holds the LeaderWorkerSet's name.
	NameLabel = "leaderworkerset.sigs.k8s.io/name"
	// GroupIndexLabel holds the group's index, 0 to replicas-1.
	GroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	// WorkerIndexLabel holds the pod's index in its group; the leader is 0.
	WorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	// GroupKeyLabel holds a hash that is the same for every pod of a group.
	GroupKeyLabel = "leaderworkerset.sigs.k8s.io/group-key"
)

// Image is the container image of the LeaderWorkerSets NewLeaderWorkerSet
// builds. kwok never pulls or runs it.
const Image = "registry.k8s.io/nginx-slim:0.27"

// NewLeaderWorkerSet returns a LeaderWorkerSet of replicas groups of size pods
// each (one leader and size-1 workers), every pod running one container of
// Image that requests cpuRequest CPU (no request when empty). When
// leaderAnnotations is not empty the leader pods get a template of their own
// carrying those annotations; otherwise leaders and workers share one
// template.
func NewLeaderWorkerSet(namespace, name string, replicas, size int32, cpuRequest string, leaderAnnotations map[string]string) *unstructured.Unstructured {
	template := map[string]any{"size": int64(size), "workerTemplate": podTemplate(cpuRequest, nil)}
	if len(leaderAnnotations) > 0 {
		template["leaderTemplate"] = podTemplate(cpuRequest, leaderAnnotations)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GroupVersionResource.GroupVersion().String(),
		"kind":       "LeaderWorkerSet",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       map[string]any{"replicas": int64(replicas), "leaderWorkerTemplate": template},
	}}
}

func podTemplate(cpuRequest string, annotations map[string]string) map[string]any {
	container := map[string]any{"name": "main", "image": Image}
	if cpuRequest != "" {
		container["resources"] = map[string]any{"requests": map[string]any{"cpu": cpuRequest}}
	}
	template := map[string]any{"spec": map[string]any{"containers": []any{container}}}
	if len(annotations) > 0 {
		_ = unstructured.SetNestedStringMap(template, annotations, "metadata", "annotations")
	}
	return template
}

// PodSelector returns the label selector of every pod of the LeaderWorkerSet
// name.
func PodSelector(name string) string { return NameLabel + "=" + name }

// GetScale reads the scale subresource of the LeaderWorkerSet
// namespace/name, as the HPA sees it: spec.replicas is the number of groups
// asked for, status.replicas the number created, and status.selector selects
// the pods whose metrics the HPA averages.
func GetScale(ctx context.Context, client dynamic.Interface, namespace, name string) (*autoscalingv1.Scale, error) {
	obj, err := client.Resource(GroupVersionResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{}, "scale")
	if err != nil {
		return nil, fmt.Errorf("get scale of LeaderWorkerSet %s/%s: %w", namespace, name, err)
	}
	scale := &autoscalingv1.Scale{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, scale); err != nil {
		return nil, fmt.Errorf("decode scale of LeaderWorkerSet %s/%s: %w", namespace, name, err)
	}
	return scale, nil
}
