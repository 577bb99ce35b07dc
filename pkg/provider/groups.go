package provider

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// groupPolicy returns the policy of a leader that reports for its group;
// ok is false for every other pod, which reports its own usage.
func (p *Provider) groupPolicy(pod *podcache.Pod) (group.Policy, bool) {
	if !p.groups || !p.pods.Leads(pod) {
		return "", false
	}
	policy := group.PolicyOf(pod.Annotation(group.AnnotationPolicy), p.defaultPolicy)
	return policy, policy != group.PolicyPod
}

// groupContainers is what a leader reports for its group under policy:
// its containers carrying the group's total, and the annotations that say
// how it was made. why is not empty when the leader has no value to
// report: a member, the leader included, does not count at face value
// (group.Classify), or has a CPU sample the readiness rule ignores. The
// HPA then counts the leader as a pod without metrics, which is at least
// as cautious as what it does with such a pod itself (see
// docs/lws-autoscaling.md).
//
// The readiness rule is the HPA's for CPU alone, yet one PodMetrics
// carries both resources: serving the memory without the CPU would show
// the leader at 0 CPU in kubectl top for as long as a member warms up
// (the HPA's initialization period, five minutes by default), so the
// memory is withheld with the CPU. That only makes an HPA on memory count
// the leader as missing, the cautious side.
func (p *Provider) groupContainers(pod *podcache.Pod, policy group.Policy, own store.PodUsage, now time.Time) ([]metricsapi.ContainerMetrics, map[string]string, string) {
	key, _ := pod.GroupKey()
	if state := group.Classify(pod.Phase(), pod.Deleting(), true); state != group.Counted {
		return nil, nil, fmt.Sprintf("%s policy: the leader is %s as the HPA counts pods", policy, state)
	}
	if notReady, ok := p.readiness.IgnoresCPU(pod.ReadinessView(), own.Timestamp, own.Window, now); ok {
		return nil, nil, fmt.Sprintf("%s policy: the leader is not ready as the HPA counts pods, which ignores its CPU: %s", policy, notReady)
	}
	leader := member(pod, &own)
	pods := p.pods.Group(key)
	members := make([]group.Member, 0, len(pods))
	for _, mp := range pods {
		if mp.UIDString() == pod.UIDString() {
			members = append(members, leader)
			continue
		}
		mm, why := p.hpaMember(mp, now)
		if why != "" {
			return nil, nil, fmt.Sprintf("%s policy: group member %s %s", policy, mp.Name, why)
		}
		members = append(members, mm)
	}
	res := group.Aggregate(policy, leader, members)
	annotations := map[string]string{
		group.AnnotationReportedPolicy: string(policy),
		group.AnnotationCovered:        strconv.Itoa(res.Covered),
		group.AnnotationMembers:        strconv.Itoa(len(members)),
	}
	return spreadOverContainers(pod, own, res.Total), annotations, ""
}

// hpaMember looks at a group member as the HPA's groupPods looks at a pod
// for CPU (group.Classify, then the readiness rule). why says what keeps it
// from counting at face value.
func (p *Provider) hpaMember(pod *podcache.Pod, now time.Time) (m group.Member, why string) {
	u, _, noMetrics := p.podUsage(pod)
	switch group.Classify(pod.Phase(), pod.Deleting(), noMetrics == "") {
	case group.Ignored:
		if pod.Deleting() {
			return group.Member{}, "is being deleted: the group is incomplete"
		}
		return group.Member{}, "has failed: the group is incomplete"
	case group.Unready:
		return group.Member{}, "is Pending, which the HPA counts as not ready"
	case group.Missing:
		return group.Member{}, "has no metrics: " + noMetrics
	}
	if notReady, ok := p.readiness.IgnoresCPU(pod.ReadinessView(), u.Timestamp, u.Window, now); ok {
		return group.Member{}, "is not ready as the HPA counts pods, which ignores its CPU: " + notReady
	}
	return member(pod, &u), ""
}

// member is the pod as aggregation sees it; u is nil for a pod without
// usage.
func member(pod *podcache.Pod, u *store.PodUsage) group.Member {
	m := group.Member{Requests: pod.Request()}
	if u != nil {
		m.HasUsage = true
		for _, c := range u.Containers {
			m.Usage[group.CPU] += int64(c.CPUNanoCores)
			m.Usage[group.Memory] += int64(c.MemoryBytes)
		}
	}
	return m
}

// spreadOverContainers divides the leader's totals (CPU in nanocores,
// memory in bytes) over its containers in proportion to their requests, or
// to their own usage where a container has no request, so `kubectl top pod
// --containers` adds up to the pod. CPU is spread in whole millicores: the
// HPA reads each container's MilliValue, which rounds up, so finer parts
// would add up to more than the total.
func spreadOverContainers(pod *podcache.Pod, own store.PodUsage, total group.Usage) []metricsapi.ContainerMetrics {
	n := len(own.Containers)
	milliCPU := (total[group.CPU] + 500_000) / 1_000_000
	cpuParts := group.Spread(milliCPU, weights(pod, own, group.CPU))
	memParts := group.Spread(total[group.Memory], weights(pod, own, group.Memory))
	out := make([]metricsapi.ContainerMetrics, n)
	for i, c := range own.Containers {
		out[i] = metricsapi.ContainerMetrics{Name: c.Name, Usage: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(cpuParts[i], resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(memParts[i], resource.BinarySI),
		}}
	}
	return out
}

func weights(pod *podcache.Pod, own store.PodUsage, r int) []float64 {
	w := make([]float64, len(own.Containers))
	for i, c := range own.Containers {
		req, ok := pod.ContainerRequest(c.Name, r)
		if !ok {
			return usageWeights(own, r)
		}
		w[i] = float64(req)
	}
	return w
}

func usageWeights(own store.PodUsage, r int) []float64 {
	w := make([]float64, len(own.Containers))
	for i, c := range own.Containers {
		if r == group.CPU {
			w[i] = float64(c.CPUNanoCores)
		} else {
			w[i] = float64(c.MemoryBytes)
		}
	}
	return w
}
