package podcache

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

// TestPoolsFronting: a pool fronts a LeaderWorkerSet of its namespace whose
// leader or worker template labels its selector matches, with the
// controller's name label and the leader's worker index; at zero groups,
// since no pod is read.
func TestPoolsFronting(t *testing.T) {
	lws := func(ns, name string, leader, worker map[string]any) *unstructured.Unstructured {
		tmpl := map[string]any{"size": int64(2), "workerTemplate": map[string]any{"metadata": map[string]any{"labels": worker}}}
		if leader != nil {
			tmpl["leaderTemplate"] = map[string]any{"metadata": map[string]any{"labels": leader}}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"replicas": int64(0), "leaderWorkerTemplate": tmpl},
		}}
	}
	pool := func(ns, name string, match map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"targetPorts": []any{map[string]any{"number": int64(8000)}}}
		if match != nil {
			spec["selector"] = map[string]any{"matchLabels": match}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
			"metadata": map[string]any{"namespace": ns, "name": name}, "spec": spec,
		}}
	}
	objs := []runtime.Object{
		// vllm: leaders app=vllm,role=leader; workers app=vllm,role=worker.
		lws("ml", "vllm", map[string]any{"app": "vllm", "role": "leader"}, map[string]any{"app": "vllm", "role": "worker"}),
		// sglang: one template for both.
		lws("ml", "sglang", nil, map[string]any{"app": "sglang"}),
		pool("ml", "leaders", map[string]any{"app": "vllm", "role": "leader"}),
		pool("ml", "by-name", map[string]any{"leaderworkerset.sigs.k8s.io/name": "vllm", "leaderworkerset.sigs.k8s.io/worker-index": "0"}),
		pool("ml", "sglang", map[string]any{"app": "sglang"}),
		pool("ml", "workers-of-one-and-leaders-of-other", map[string]any{"role": "leader", "app": "sglang"}),
		pool("ml", "no-selector", nil),
		pool("other", "elsewhere", map[string]any{"app": "vllm"}),
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		inferencePoolsResource: "InferencePoolList", leaderWorkerSetsResource: "LeaderWorkerSetList",
	}, objs...)
	p, err := NewPools(dyn)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.pools.HasSynced, p.sets.HasSynced) {
		t.Fatal("informers did not sync")
	}
	for _, tt := range []struct {
		lws   string
		want  []string
		known bool
	}{
		{"vllm", []string{"by-name", "leaders"}, true},
		{"sglang", []string{"sglang"}, true},
		{"ghost", nil, false},
	} {
		got, known := p.Fronting("ml", tt.lws)
		if diff := cmp.Diff(tt.want, got); diff != "" || known != tt.known {
			t.Errorf("Fronting(ml, %s) = %v, %v; want %v, %v (-want +got):\n%s", tt.lws, got, known, tt.want, tt.known, diff)
		}
	}
}
