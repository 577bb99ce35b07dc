package provider

import (
	"fmt"
	"math"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// GroupIndex finds the pods of a LeaderWorkerSet group by group.Key; a
// client-go cache.Indexer with group.IndexName satisfies it.
type GroupIndex interface {
	ByIndex(indexName, indexedValue string) ([]any, error)
}

// groupMetrics turns a leader's own metrics into its group's, when its
// policy asks for that; any other pod's metrics come back unchanged. why is
// not empty when the leader has no value to report: a member that the HPA
// would count has no fresh metrics, or would have its CPU sample ignored as
// not ready. The HPA then counts the leader as a pod without metrics, which
// is at least as cautious as what it does with such a pod itself (see
// docs/lws-autoscaling.md).
func (p *Provider) groupMetrics(pod *corev1.Pod, own store.PodUsage, m metricsapi.PodMetrics, now time.Time) (out metricsapi.PodMetrics, why string) {
	if p.groups == nil || !group.IsLeader(pod) {
		return m, ""
	}
	policy := group.PolicyOf(pod, p.defaultPolicy)
	if policy == group.PolicyPod {
		return m, ""
	}
	key, _ := group.Key(pod)
	objs, err := p.groups.ByIndex(group.IndexName, key)
	if err != nil {
		return m, fmt.Sprintf("the members of group %s cannot be listed: %v", key, err)
	}
	if notReady, ok := p.readiness.IgnoresCPU(pod, own.Timestamp, own.Window, now); ok {
		return m, fmt.Sprintf("%s policy: the leader is not ready as the HPA counts pods, which ignores its CPU: %s", policy, notReady)
	}
	leader := member(pod, &own)
	members := make([]group.Member, 0, len(objs))
	for _, o := range objs {
		mp, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if mp.UID == pod.UID {
			members = append(members, leader)
			continue
		}
		mm, why := p.hpaMember(mp, now)
		if why != "" {
			return m, fmt.Sprintf("%s policy: group member %s %s", policy, mp.Name, why)
		}
		members = append(members, mm)
	}
	res := group.Aggregate(policy, leader, members)

	out = m
	out.Annotations = map[string]string{
		group.AnnotationReportedPolicy: string(policy),
		group.AnnotationCovered:        strconv.Itoa(res.Covered),
		group.AnnotationMembers:        strconv.Itoa(len(members)),
	}
	out.Containers = spreadOverContainers(pod, own, res.Total)
	return out, ""
}

// hpaMember looks at a group member as the HPA's groupPods looks at a pod
// (k8s.io/kubernetes v1.37.2,
// pkg/controller/podautoscaler/replica_calculator.go). why says what keeps
// it from counting at face value: being deleted or failed (the HPA would
// ignore it, and the group is incomplete), Pending, no fresh metrics, or a
// CPU sample the readiness rule ignores.
func (p *Provider) hpaMember(pod *corev1.Pod, now time.Time) (m group.Member, why string) {
	switch {
	case pod.DeletionTimestamp != nil:
		return group.Member{}, "is being deleted: the group is incomplete"
	case pod.Status.Phase == corev1.PodFailed:
		return group.Member{}, "has failed: the group is incomplete"
	case pod.Status.Phase == corev1.PodPending:
		return group.Member{}, "is Pending, which the HPA counts as not ready"
	}
	u, noMetrics := p.podUsage(pod)
	if noMetrics != "" {
		return group.Member{}, "has no metrics: " + noMetrics
	}
	if notReady, ok := p.readiness.IgnoresCPU(pod, u.Timestamp, u.Window, now); ok {
		return group.Member{}, "is not ready as the HPA counts pods, which ignores its CPU: " + notReady
	}
	return member(pod, &u), ""
}

func member(pod *corev1.Pod, u *store.PodUsage) group.Member {
	var m group.Member
	for i, r := range group.Resources {
		if req, ok := group.Request(pod, r); ok {
			m.HasRequest[i], m.Request[i] = true, float64(req)/1000
		}
	}
	if u != nil {
		m.HasUsage = true
		for _, c := range u.Containers {
			m.Usage[0] += float64(c.CPUNanoCores) / 1e9
			m.Usage[1] += float64(c.MemoryBytes)
		}
	}
	return m
}

// spreadOverContainers divides the leader's totals (CPU in whole
// millicores, memory in bytes) over its containers in proportion to their
// requests, or to their own usage where a container has no request, so
// `kubectl top pod --containers` adds up to the pod.
func spreadOverContainers(pod *corev1.Pod, own store.PodUsage, total group.Amounts) []metricsapi.ContainerMetrics {
	n := len(own.Containers)
	// Whole millicores: the HPA reads each container's MilliValue, which
	// rounds up, so finer parts would add up to more than the total.
	cpuParts := group.Spread(int64(math.Round(total[0]*1e3)), weights(pod, own, corev1.ResourceCPU))
	memParts := group.Spread(int64(math.Round(total[1])), weights(pod, own, corev1.ResourceMemory))
	out := make([]metricsapi.ContainerMetrics, n)
	for i, c := range own.Containers {
		out[i] = metricsapi.ContainerMetrics{Name: c.Name, Usage: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(cpuParts[i], resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(memParts[i], resource.BinarySI),
		}}
	}
	return out
}

func weights(pod *corev1.Pod, own store.PodUsage, r corev1.ResourceName) []float64 {
	w := make([]float64, len(own.Containers))
	for i, c := range own.Containers {
		req, ok := group.ContainerRequest(pod, c.Name, r)
		if !ok {
			return usageWeights(own, r)
		}
		w[i] = float64(req)
	}
	return w
}

func usageWeights(own store.PodUsage, r corev1.ResourceName) []float64 {
	w := make([]float64, len(own.Containers))
	for i, c := range own.Containers {
		if r == corev1.ResourceCPU {
			w[i] = float64(c.CPUNanoCores)
		} else {
			w[i] = float64(c.MemoryBytes)
		}
	}
	return w
}
