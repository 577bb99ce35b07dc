package cluster

import (
	"fmt"
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
// the stages that move nodes and pods through their lifecycle. kwok's health
// server listens on healthAddr.
func kwokConfig(podCIDR, healthAddr string) string {
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
	return strings.Join([]string{
		options,
		nodeInitializeStage,
		podReadyStage,
		podDeleteStage,
	}, "---\n")
}

// stage is the kwok Stage name for objects of kind (a core/v1 kind): the
// header up to its selector's match expressions, then rest.
func stage(name, kind, rest string) string {
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %s
spec:
  resourceRef:
    apiGroup: v1
    kind: %s
  selector:
    matchExpressions:
`, name, kind) + rest
}

// nodeInitializeStage turns a node that is not Ready into a Ready, Running
// node. Addresses, daemon endpoints and resources are the creator's: every
// node kwok manages here is a NodeObject. No stage refreshes the conditions
// later: kwok renews the node's lease, and no node lifecycle controller runs
// to read heartbeats.
var nodeInitializeStage = stage("node-initialize", "Node", `    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kernelVersion: kwok
        containerRuntimeVersion: kwok
        kubeletVersion: v1.37.2
        kubeProxyVersion: v1.37.2
      phase: Running
`)

// podReadyStage marks a pending, scheduled pod Running and Ready, with every
// container running, every init container finished (sidecars running), and
// host and pod IPs filled in.
var podReadyStage = stage("pod-ready", "Pod", `    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: ["Pending"]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      {{ range .spec.readinessGates }}
      - type: {{ .conditionType | Quote }}
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        restartCount: 0
        {{ if eq (or .restartPolicy "") "Always" }}
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
        {{ else }}
        started: false
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
        {{ end }}
      {{ end }}
      {{ with NodeIPsWith .spec.nodeName }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName (or .spec.hostNetwork false) (or .metadata.uid "") (or .metadata.name "") (or .metadata.namespace "") }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
`)

// podDeleteStage plays the kubelet's part in graceful deletion: a pod marked
// for deletion loses its finalizers and is removed.
var podDeleteStage = stage("pod-delete", "Pod", `    - key: .metadata.deletionTimestamp
      operator: Exists
  next:
    finalizers:
      empty: true
    delete: true
`)
