package fakekubelet

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

// applyDataFaults changes a node's Summary at instant t as its data faults
// say: a second, different copy of duplicated pods right after the pod,
// and the pods of every other node of the fleet at the end. Copies report
// twice the CPU counter and working set of the pod they copy, so whoever
// reads them can tell them from the real pod. Callers hold no node locks.
func (n *Node) applyDataFaults(s *stats.Summary, faults FaultState, t instant, onlyCPUAndMemory bool) {
	if dup := faults.DuplicatePods; dup != "" {
		pods := make([]stats.PodStats, 0, len(s.Pods)+1)
		for _, p := range s.Pods {
			pods = append(pods, p)
			if dup == AllPods || dup == p.PodRef.Namespace+"/"+p.PodRef.Name {
				pods = append(pods, doubled(p))
			}
		}
		s.Pods = pods
	}
	if faults.ForeignPods {
		ts := metav1.NewTime(n.fleet.tl.wall(t))
		for _, o := range n.fleet.Nodes() {
			if o == n {
				continue
			}
			o.mu.RLock()
			for _, ps := range o.sortedPodsLocked() {
				s.Pods = append(s.Pods, doubled(n.fleet.podStats(ps, t, ts, onlyCPUAndMemory)))
			}
			o.mu.RUnlock()
		}
	}
}

// doubled returns a copy of p whose CPU counters and working sets are twice
// those of p. The copy shares nothing with p.
func doubled(p stats.PodStats) stats.PodStats {
	out := p
	out.CPU, out.Memory = doubleCPU(p.CPU), doubleMemory(p.Memory)
	out.Containers = make([]stats.ContainerStats, len(p.Containers))
	for i, c := range p.Containers {
		c.CPU, c.Memory = doubleCPU(c.CPU), doubleMemory(c.Memory)
		out.Containers[i] = c
	}
	return out
}

func doubleCPU(c *stats.CPUStats) *stats.CPUStats {
	if c == nil {
		return nil
	}
	out := &stats.CPUStats{Time: c.Time}
	if c.UsageNanoCores != nil {
		out.UsageNanoCores = u64(2 * *c.UsageNanoCores)
	}
	if c.UsageCoreNanoSeconds != nil {
		out.UsageCoreNanoSeconds = u64(2 * *c.UsageCoreNanoSeconds)
	}
	return out
}

func doubleMemory(m *stats.MemoryStats) *stats.MemoryStats {
	if m == nil {
		return nil
	}
	if m.WorkingSetBytes == nil {
		out := *m
		return &out
	}
	out := summarytest.Memory(m.Time, 2**m.WorkingSetBytes, 0)
	out.AvailableBytes = m.AvailableBytes
	return out
}

func u64(v uint64) *uint64 { return &v }
