package fakekubelet

import (
	"math/bits"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// Summary returns the node's stats at the current sample instant, as
// GET /stats/summary would serve them: with the data faults in force, a
// pod's copy (DuplicatePods) right after it and other nodes' pods
// (ForeignPods) at the end, copies with twice the usage of the pod.
func (n *Node) Summary(onlyCPUAndMemory bool) *stats.Summary {
	f := n.fleet
	f.mu.RLock()
	defer f.mu.RUnlock()
	t := f.tl.now() - instant(n.faults[fakecore.FaultClockBackwards].Offset.Truncate(time.Second))
	s := n.summaryLocked(t, onlyCPUAndMemory, n.faults[FaultDuplicatePods])
	if _, ok := n.faults[FaultForeignPods]; ok {
		ts := metav1.NewTime(f.tl.wall(t))
		for _, o := range f.nodesLocked() {
			if o == n {
				continue
			}
			for _, ps := range o.sortedPodsLocked() {
				s.Pods = append(s.Pods, f.podStats(ps, t, ts, onlyCPUAndMemory, 2))
			}
		}
	}
	return s
}

// sample holds the raw numbers of one cgroup at one instant.
type sample struct {
	rate, cumulative uint64 // nanocores, core-nanoseconds
	workingSet       uint64
	limit            uint64 // 0 = none
}

func (s *sample) add(o sample) {
	s.rate += o.rate
	s.cumulative += o.cumulative
	s.workingSet += o.workingSet
	s.limit += o.limit
}

// stats renders s as the container name started at start, sampled at ts.
func (s sample) stats(name string, start, ts metav1.Time) stats.ContainerStats {
	return stats.ContainerStats{Name: name, StartTime: start, CPU: summarytest.CPU(ts, s.rate, s.cumulative), Memory: summarytest.Memory(ts, s.workingSet, s.limit)}
}

// summaryLocked renders the node at instant t, each pod a DuplicatePods
// fault dup names (every pod, without a name) followed by its copy.
func (n *Node) summaryLocked(t instant, onlyCPUAndMemory bool, dup Fault) *stats.Summary {
	f := n.fleet
	ts := metav1.NewTime(f.tl.wall(t))
	cpu, mem := f.cfg.NodeBaseUsage.CPUNanoCores, f.cfg.NodeBaseUsage.MemoryBytes
	// The kubelet and the runtime share the node's base usage, at a
	// constant rate since the node started.
	kubelet := sample{rate: cpu / 2, cumulative: counter{accAt: n.start, rate: cpu / 2}.at(t), workingSet: mem / 2}
	runtime := sample{rate: cpu - cpu/2, cumulative: counter{accAt: n.start, rate: cpu - cpu/2}.at(t), workingSet: mem - mem/2}

	pods := n.sortedPodsLocked()
	out := &stats.Summary{Pods: make([]stats.PodStats, 0, len(pods))}
	podsTotal := sample{rate: n.podsCPU.rate, cumulative: n.podsCPU.at(t)}
	for _, ps := range pods {
		pod := f.podStats(ps, t, ts, onlyCPUAndMemory, 1)
		podsTotal.workingSet += *pod.Memory.WorkingSetBytes
		out.Pods = append(out.Pods, pod)
		if dup.Kind != "" && (dup.Pod == "" || dup.Pod == ps.pod.Namespace+"/"+ps.pod.Name) {
			out.Pods = append(out.Pods, f.podStats(ps, t, ts, onlyCPUAndMemory, 2))
		}
	}

	start := metav1.NewTime(f.tl.wall(n.start))
	node := sample{limit: f.cfg.NodeMemoryCapacityBytes}
	node.add(kubelet)
	node.add(runtime)
	node.add(podsTotal)
	total := node.stats("", start, ts)
	out.Node = stats.NodeStats{
		NodeName:         n.name,
		SystemContainers: []stats.ContainerStats{kubelet.stats("kubelet", start, ts), podsTotal.stats("pods", start, ts), runtime.stats("runtime", start, ts)},
		StartTime:        start,
		CPU:              total.CPU,
		Memory:           total.Memory,
	}
	if !onlyCPUAndMemory {
		out.Node.Network = summarytest.Network(ts)
		out.Node.Fs = summarytest.Fs(ts, 8<<30)
		maxPID, procs := int64(4194304), int64(100+5*len(out.Pods))
		out.Node.Rlimit = &stats.RlimitStats{Time: ts, MaxPID: &maxPID, NumOfRunningProcesses: &procs}
	}
	return out
}

// podStats renders one pod at instant t, its CPU and memory times scale;
// the pod's cgroup is the sum of its containers. Callers hold the fleet's
// lock.
func (f *Fleet) podStats(ps *podState, t instant, ts metav1.Time, onlyCPUAndMemory bool, scale uint64) stats.PodStats {
	var total sample
	limited := true
	pod := stats.PodStats{
		PodRef:     stats.PodReference{Name: ps.pod.Name, Namespace: ps.pod.Namespace, UID: ps.pod.UID},
		StartTime:  metav1.NewTime(f.tl.wall(ps.start)),
		Containers: make([]stats.ContainerStats, 0, len(ps.containers)),
	}
	for _, c := range ps.containers {
		cs := sample{rate: scale * c.cpu.rate, cumulative: scale * c.cpu.at(t), workingSet: scale * c.memory, limit: c.limit}
		total.add(cs)
		limited = limited && c.limit > 0
		stats := cs.stats(c.name, pod.StartTime, ts)
		if !onlyCPUAndMemory {
			stats.Rootfs = summarytest.Fs(ts, 4<<20)
			stats.Logs = summarytest.Fs(ts, 64<<10)
		}
		pod.Containers = append(pod.Containers, stats)
	}
	if !limited {
		total.limit = 0 // a pod is limited only if all its containers are
	}
	sum := total.stats("", pod.StartTime, ts)
	pod.CPU, pod.Memory = sum.CPU, sum.Memory
	if !onlyCPUAndMemory {
		pod.Network = summarytest.Network(ts)
		pod.EphemeralStorage = summarytest.Fs(ts, uint64(len(ps.containers))*(4<<20+64<<10))
	}
	return pod
}

// instant is a point in time as an offset from a timeline's epoch. Offsets
// come from the clock's monotonic reading, so they never go backwards.
type instant time.Duration

// sampleInterval quantises sample instants to the Summary API's precision.
const sampleInterval = time.Second

// timeline maps clock readings to sample instants.
type timeline struct {
	clock  clock.Clock
	start  time.Time     // clock reading at creation, with its monotonic part
	epoch  time.Time     // wall time of instant 0, a whole second
	offset time.Duration // start - epoch
}

func newTimeline(c clock.Clock) *timeline {
	start := c.Now()
	epoch := start.Round(0).Truncate(sampleInterval)
	return &timeline{clock: c, start: start, epoch: epoch, offset: start.Round(0).Sub(epoch)}
}

// now returns the current sample instant: the latest interval boundary not
// after the clock's current reading.
func (tl *timeline) now() instant {
	d := tl.clock.Since(tl.start) + tl.offset
	r := d % sampleInterval
	if r < 0 {
		r += sampleInterval
	}
	return instant(d - r)
}

// wall returns the wall-clock time of an instant.
func (tl *timeline) wall(i instant) time.Time { return tl.epoch.Add(time.Duration(i)) }

// counter integrates a CPU rate (nanocores) into core-nanoseconds.
type counter struct {
	acc   uint64  // value at accAt
	accAt instant // origin of the current segment
	rate  uint64  // nanocores since accAt
}

// at returns the counter's value at instant t. Instants before the current
// segment report the value at its start.
func (c counter) at(t instant) uint64 {
	if t <= c.accAt {
		return c.acc
	}
	return c.acc + mulDiv(c.rate, uint64(t-c.accAt))
}

// setRate changes the rate from instant t on.
func (c *counter) setRate(t instant, rate uint64) {
	if t > c.accAt {
		c.acc = c.at(t)
		c.accAt = t
	}
	c.rate = rate
}

// mulDiv returns rate*ns/1e9 without overflow for any realistic inputs.
func mulDiv(rate, ns uint64) uint64 {
	hi, lo := bits.Mul64(rate, ns)
	if hi >= 1e9 {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, 1e9)
	return q
}
