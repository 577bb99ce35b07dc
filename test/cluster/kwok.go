package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KwokNodeAnnotation marks the nodes kwok manages. NodeObject sets it; a
// node made some other way needs it too, and NodeObject's addresses,
// daemon endpoints and resources, which kwok keeps.
const (
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"
)

// kwokConfig returns kwok's --config file: the controller options followed by
// stages, the Stages that move nodes and pods through their lifecycle.
// kwok's health server listens on healthAddr.
func kwokConfig(podCIDR, healthAddr string, stages []string) string {
	options := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: %q
  nodeIP: "127.0.0.1"
  serverAddress: %q
  manageAllNodes: false
  manageNodesWithAnnotationSelector: "%s=%s"
  nodeLeaseDurationSeconds: 120
  nodeLeaseParallelism: 16
  nodePlayStageParallelism: 16
  podPlayStageParallelism: 32
  podsOnNodeSyncParallelism: 8
  enableDebuggingHandlers: false
  enableProfilingHandler: false
`, podCIDR, healthAddr, KwokNodeAnnotation, KwokNodeAnnotationValue)
	return strings.Join(append([]string{options}, stages...), "---\n")
}

// kwokStages are kwok's own stages, from the source of its release in dir
// (SourceDir), that make a node Ready and a scheduled pod Running and Ready
// at once, then podDeleteStage. kwok's node stage keeps the addresses,
// daemon endpoints and resources of a NodeObject and reports kwok's version
// as the kubelet's. No stage refreshes a node's conditions later: kwok renews
// the node's lease, and no node lifecycle controller runs to read heartbeats.
func kwokStages(dir string) ([]string, error) {
	var stages []string
	for _, name := range []string{"node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, "kustomize", "stage", filepath.FromSlash(name)))
		if err != nil {
			return nil, fmt.Errorf("kwok stage: %w", err)
		}
		stages = append(stages, strings.TrimRight(string(data), "\n")+"\n")
	}
	return append(stages, podDeleteStage), nil
}

// podDeleteStage plays the kubelet's part in graceful deletion: a pod marked
// for deletion loses its finalizers and is removed. (kwok's own pod-delete
// stage leaves the finalizers, and with them the pod.)
const podDeleteStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
  next:
    finalizers:
      empty: true
    delete: true
`
