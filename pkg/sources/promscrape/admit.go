package promscrape

import (
	"errors"

	"k8s.io/klog/v2"
)

// Reasons an attributed sample is dropped, the "reason" label of the
// dropped-samples counter. The set is closed.
const (
	// DropUnknownPod: an exporter named a pod the collection's pod list
	// does not hold.
	DropUnknownPod = "unknown_pod"
	// DropOtherNode: an exporter named a pod on another node than its own.
	DropOtherNode = "other_node"
	// DropOwnTarget: the pod's own target gave the same metric and
	// container; the pod's word wins over the exporter's.
	DropOwnTarget = "own_target"
	// DropOutOfRange: the value lies outside the metric's min or max.
	DropOutOfRange = "out_of_range"
)

// ownKey is a metric of a pod's container ("" for the pod's series that
// name none).
type ownKey struct {
	metric         int
	namespace, pod string
	container      string
}

// admission decides, for one collection, which samples of each target are
// kept.
type admission struct {
	// nodes is each listed pod's node.
	nodes map[podKey]string
	// own holds what the pods' own targets supplied.
	own map[ownKey]bool
}

func newAdmission(pods []Pod, targets []Target, results []result) *admission {
	a := &admission{nodes: make(map[podKey]string, len(pods)), own: map[ownKey]bool{}}
	for i := range pods {
		a.nodes[podKey{pods[i].Namespace, pods[i].Name}] = pods[i].Node
	}
	for i := range targets {
		if targets[i].Kind != KindPod {
			continue
		}
		for _, s := range results[i].samples {
			a.own[ownKey{s.Metric, s.Namespace, s.Pod, s.Container}] = true
		}
	}
	return a
}

// admit returns the samples of t that may be kept, counting the others by
// reason. An exporter speaks only for pods on its own node, and never over
// a pod's own target; every sample must lie within its metric's bounds
// (dropped, never clamped, so a wrong value cannot pass as a limit).
func (a *admission) admit(t *Target, metrics []Metric, samples []Sample) []Sample {
	out := samples[:0]
	for _, s := range samples {
		reason := ""
		if t.Kind == KindExporter {
			switch node, ok := a.nodes[podKey{s.Namespace, s.Pod}]; {
			case !ok:
				reason = DropUnknownPod
			case node != t.Node || node == "":
				// An unscheduled pod is on no exporter's node.
				reason = DropOtherNode
			case a.own[ownKey{s.Metric, s.Namespace, s.Pod, s.Container}]:
				reason = DropOwnTarget
			}
		}
		if reason == "" && !metrics[s.Metric].inRange(s.Value) {
			reason = DropOutOfRange
		}
		if reason != "" {
			droppedSamples.WithLabelValues(t.Kind, reason).Inc()
			continue
		}
		out = append(out, s)
	}
	return out
}

// refusalKey is one refusal of one pod incarnation.
type refusalKey struct {
	uid, exporter, reason string
}

// noteRefusals counts this collection's refused pods, logs each refusal
// once (not at every collection, for as long as it lasts), and logs the
// other target errors (bad annotations) as before.
func (s *Source) noteRefusals(errs []error) {
	seen := make(map[refusalKey]bool, len(s.refused))
	for _, err := range errs {
		var r *RefusedError
		if !errors.As(err, &r) {
			klog.V(2).InfoS("Pod asks to be scraped but cannot be", "err", err)
			continue
		}
		refusedTargets.WithLabelValues(r.Kind, r.Reason).Inc()
		k := refusalKey{r.UID, r.Exporter, r.Reason}
		seen[k] = true
		if !s.refused[k] {
			klog.InfoS("Pod refused as a scrape target", "pod", r.Pod, "exporter", r.Exporter, "reason", r.Reason)
		}
	}
	s.refused = seen
}
