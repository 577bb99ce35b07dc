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
	metric    int
	container string
}

// setOwn records what the pod's own target gave at its last scrape.
func (s *Source) setOwn(pod *Pod, samples []Sample) {
	own := make(map[ownKey]bool, len(samples))
	for _, sm := range samples {
		own[ownKey{sm.Metric, sm.Container}] = true
	}
	s.mu.Lock()
	s.own[podKey{pod.Namespace, pod.Name}] = own
	s.mu.Unlock()
}

// admit returns the samples of t that may be kept, counting the others by
// reason. An exporter speaks only for pods on its own node, and never over
// a pod's own target (as its last scrape gave; the store serves a pod's own
// series over an exporter's in any case); every sample must lie within its
// metric's bounds (dropped, never clamped, so a wrong value cannot pass as
// a limit).
func (s *Source) admit(t *Target, pods map[podKey]*Pod, samples []Sample) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := samples[:0]
	for _, sm := range samples {
		reason := ""
		if t.Kind == KindExporter {
			switch p, ok := pods[podKey{sm.Namespace, sm.Pod}]; {
			case !ok:
				reason = DropUnknownPod
			case p.Node != t.Node || p.Node == "":
				// An unscheduled pod is on no exporter's node.
				reason = DropOtherNode
			case s.own[podKey{sm.Namespace, sm.Pod}][ownKey{sm.Metric, sm.Container}]:
				reason = DropOwnTarget
			}
		}
		if reason == "" && !s.cfg.Metrics[sm.Metric].inRange(sm.Value) {
			reason = DropOutOfRange
		}
		if reason != "" {
			droppedSamples.WithLabelValues(t.Kind, reason).Inc()
			continue
		}
		out = append(out, sm)
	}
	return out
}

// refusalKey is one refusal of one pod incarnation.
type refusalKey struct {
	uid, target, reason string
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
		k := refusalKey{r.UID, r.Target, r.Reason}
		seen[k] = true
		if !s.refused[k] {
			klog.InfoS("Pod refused as a scrape target", "pod", r.Pod, "kind", r.Kind, "target", r.Target, "reason", r.Reason)
		}
	}
	s.refused = seen
}
