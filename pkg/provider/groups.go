package provider

import (
	"math"
	"strconv"

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
// policy asks for that; any other pod's metrics come back unchanged.
func (p *Provider) groupMetrics(pod *corev1.Pod, own store.PodUsage, m metricsapi.PodMetrics) metricsapi.PodMetrics {
	if p.groups == nil || !group.IsLeader(pod) {
		return m
	}
	policy := group.PolicyOf(pod, p.defaultPolicy)
	if policy == group.PolicyPod {
		return m
	}
	key, _ := group.Key(pod)
	objs, err := p.groups.ByIndex(group.IndexName, key)
	if err != nil {
		return m
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
		m, _ := p.memberOf(mp)
		members = append(members, m)
	}
	res := group.Aggregate(policy, leader, members)

	out := m
	out.Annotations = map[string]string{
		group.AnnotationReportedPolicy: string(policy),
		group.AnnotationCovered:        strconv.Itoa(res.Covered),
		group.AnnotationMembers:        strconv.Itoa(len(members)),
	}
	out.Containers = spreadOverContainers(pod, own, res.Total)
	return out
}

// memberOf looks up a group member's usage; one without metrics (nil
// usage) is left out of the sums.
func (p *Provider) memberOf(pod *corev1.Pod) (group.Member, *store.PodUsage) {
	if notRunning(pod) != "" {
		return member(pod, nil), nil
	}
	u, why := p.usage.Pod(pod.Namespace, pod.Name, string(pod.UID), pod.Spec.NodeName)
	if why != nil {
		return member(pod, nil), nil
	}
	return member(pod, &u), &u
}

func member(pod *corev1.Pod, u *store.PodUsage) group.Member {
	var m group.Member
	for i, r := range group.Resources {
		if req, ok := group.Request(pod, r); ok && req > 0 {
			m.HasRequest[i], m.Request[i] = true, toBase(req, r)
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

// toBase turns Request units (millicores, bytes) into Amounts units (cores,
// bytes).
func toBase(v int64, r corev1.ResourceName) float64 {
	if r == corev1.ResourceCPU {
		return float64(v) / 1000
	}
	return float64(v)
}

// spreadOverContainers divides the leader's totals over its containers in
// proportion to their requests, or to their own usage where a container has
// no request, so `kubectl top pod --containers` adds up to the pod.
func spreadOverContainers(pod *corev1.Pod, own store.PodUsage, total group.Amounts) []metricsapi.ContainerMetrics {
	n := len(own.Containers)
	cpuParts := group.Spread(int64(math.Round(total[0]*1e9)), weights(pod, own, corev1.ResourceCPU))
	memParts := group.Spread(int64(math.Round(total[1])), weights(pod, own, corev1.ResourceMemory))
	out := make([]metricsapi.ContainerMetrics, n)
	for i, c := range own.Containers {
		out[i] = metricsapi.ContainerMetrics{Name: c.Name, Usage: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewScaledQuantity(cpuParts[i], resource.Nano),
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
