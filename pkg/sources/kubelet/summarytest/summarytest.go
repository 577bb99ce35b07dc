// Package summarytest builds kubelet Summary API responses for tests,
// benchmarks, fuzz seeds and the fake kubelet, on the kubelet's own wire
// types (k8s.io/kubelet/pkg/apis/stats/v1alpha1), so that every Summary the
// tests serve or decode is one a kubelet could write.
//
// CPU, Memory, Fs and Network make the entries of one cgroup from its raw
// numbers; Generate makes a whole node's Summary from a seed.
package summarytest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// CPU is a cgroup's CPU entry at ts: its rate in nanocores and its
// cumulative usage in core-nanoseconds.
func CPU(ts metav1.Time, nanoCores, coreNanoSeconds uint64) *stats.CPUStats {
	return &stats.CPUStats{Time: ts, UsageNanoCores: &nanoCores, UsageCoreNanoSeconds: &coreNanoSeconds}
}

// Memory is a cgroup's memory entry at ts, derived from its working set as
// the kubelet's fields relate: page cache on top of it for usage, anonymous
// memory below it for RSS. AvailableBytes is set only for a cgroup with a
// limit (limit > 0), as the kubelet leaves it out for one without.
func Memory(ts metav1.Time, workingSet, limit uint64) *stats.MemoryStats {
	m := &stats.MemoryStats{
		Time:            ts,
		UsageBytes:      u64(workingSet + workingSet/8),
		WorkingSetBytes: u64(workingSet),
		RSSBytes:        u64(workingSet - workingSet/4),
		PageFaults:      u64(workingSet / 4096),
		MajorPageFaults: u64(0),
	}
	if limit > 0 {
		avail := uint64(0)
		if limit > workingSet {
			avail = limit - workingSet
		}
		m.AvailableBytes = u64(avail)
	}
	return m
}

// Fs is a filesystem entry at ts of a 100 GiB volume with used bytes taken.
func Fs(ts metav1.Time, used uint64) *stats.FsStats {
	const capacity, inodes = 100 << 30, 6 << 20
	return &stats.FsStats{
		Time:           ts,
		AvailableBytes: u64(capacity - used),
		CapacityBytes:  u64(capacity),
		UsedBytes:      u64(used),
		InodesFree:     u64(inodes - used/4096),
		Inodes:         u64(inodes),
		InodesUsed:     u64(used / 4096),
	}
}

// Network is a network entry at ts with one idle interface, eth0.
func Network(ts metav1.Time) *stats.NetworkStats {
	eth := stats.InterfaceStats{Name: "eth0", RxBytes: u64(0), RxErrors: u64(0), TxBytes: u64(0), TxErrors: u64(0)}
	return &stats.NetworkStats{Time: ts, InterfaceStats: eth, Interfaces: []stats.InterfaceStats{eth}}
}

func u64(v uint64) *uint64 { return &v }

// Node describes one generated Summary.
type Node struct {
	Name       string
	Pods       int
	Containers int
	// Time is the sample time.
	Time time.Time
	// Start is when the node's containers started; a day before Time when
	// zero. Keep it fixed across samples of one series.
	Start time.Time
}

// PodName is the name of pod i on node, in namespace NamespaceOf(i).
func PodName(node string, i int) string { return fmt.Sprintf("%s-pod-%d", node, i) }

// NamespaceOf spreads pods over ten namespaces.
func NamespaceOf(i int) string { return fmt.Sprintf("ns-%d", i%10) }

// Summary returns n's Summary as a kubelet writes it with
// only_cpu_and_memory=true, with values drawn from rng. Containers have run
// at their rate since their start, so the cumulative counters match it.
func Summary(rng *rand.Rand, n Node) *stats.Summary {
	start := n.Start
	if start.IsZero() {
		start = n.Time.Add(-24 * time.Hour)
	}
	ts, since := metav1.NewTime(n.Time), n.Time.Sub(start).Seconds()
	entry := func(cores float64, mem uint64) (*stats.CPUStats, *stats.MemoryStats) {
		return CPU(ts, uint64(cores*1e9), uint64(cores*since*1e9)), Memory(ts, mem, 0)
	}
	s := &stats.Summary{Node: stats.NodeStats{NodeName: n.Name, StartTime: metav1.NewTime(start.Add(-time.Hour))}}
	s.Node.CPU, s.Node.Memory = entry(4*rng.Float64(), 8<<30+rng.Uint64N(8<<30))
	s.Pods = make([]stats.PodStats, n.Pods)
	for i := range s.Pods {
		p := stats.PodStats{
			PodRef: stats.PodReference{Name: PodName(n.Name, i), Namespace: NamespaceOf(i),
				UID: fmt.Sprintf("%08x-0000-4000-8000-%012x", rng.Uint32(), rng.Uint64N(1<<48))},
			StartTime:  metav1.NewTime(start),
			Containers: make([]stats.ContainerStats, n.Containers),
		}
		for j := range p.Containers {
			c := stats.ContainerStats{Name: fmt.Sprintf("c%d", j), StartTime: metav1.NewTime(start)}
			c.CPU, c.Memory = entry(rng.Float64()/2, 16<<20+rng.Uint64N(512<<20))
			p.Containers[j] = c
		}
		p.CPU, p.Memory = entry(rng.Float64(), 64<<20)
		s.Pods[i] = p
	}
	return s
}

// Generate is Summary encoded as the kubelet serves it.
func Generate(rng *rand.Rand, n Node) []byte { return Encode(Summary(rng, n)) }

// Encode returns s as JSON.
func Encode(s *stats.Summary) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // the wire types hold plain values only
	}
	return b
}
