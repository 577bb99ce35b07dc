package fakekubelet

import (
	"io"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// Summary returns the node's stats as GET /stats/summary serves them now,
// with the data faults: a pod's copy (DuplicatePods) right after it, other
// nodes' pods (ForeignPods) at the end, both with twice the pod's usage.
func (n *Node) Summary(onlyCPUAndMemory bool) *stats.Summary {
	f := n.fleet
	f.mu.RLock()
	defer f.mu.RUnlock()
	t := f.tl.now() - instant(n.faults[fakecore.FaultClockBackwards].Offset.Truncate(time.Second))
	s := n.summaryLocked(t, onlyCPUAndMemory, n.faults[FaultDuplicatePods])
	if _, ok := n.faults[FaultForeignPods]; ok {
		ts := metav1.NewTime(f.tl.wall(t))
		for _, o := range slices.DeleteFunc(f.nodesLocked(), func(o *Node) bool { return o == n }) {
			for _, ps := range o.sortedPodsLocked() {
				s.Pods = append(s.Pods, f.podStats(ps, t, ts, onlyCPUAndMemory, 2))
			}
		}
	}
	return s
}

// sample holds the raw numbers of one cgroup at one instant.
type sample struct {
	rate, cumulative  uint64 // nanocores, core-nanoseconds
	workingSet, limit uint64 // limit 0: none
}

func (s *sample) add(o sample) {
	s.rate, s.cumulative, s.workingSet, s.limit = s.rate+o.rate, s.cumulative+o.cumulative, s.workingSet+o.workingSet, s.limit+o.limit
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
	// The kubelet and the runtime share the node's base usage, at a
	// constant rate since the node started.
	base := func(cpu, mem uint64) sample {
		return sample{rate: cpu, cumulative: counter{accAt: n.start, rate: cpu}.at(t), workingSet: mem}
	}
	cpu, mem := f.cfg.NodeBaseUsage.CPUNanoCores, f.cfg.NodeBaseUsage.MemoryBytes
	kubelet, runtime := base(cpu/2, mem/2), base(cpu-cpu/2, mem-mem/2)
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
	out.Node = stats.NodeStats{NodeName: n.name, StartTime: start, CPU: total.CPU, Memory: total.Memory,
		SystemContainers: []stats.ContainerStats{kubelet.stats("kubelet", start, ts), podsTotal.stats("pods", start, ts), runtime.stats("runtime", start, ts)}}
	if !onlyCPUAndMemory {
		out.Node.Network = summarytest.Network(ts)
		out.Node.Fs = summarytest.Fs(ts, 8<<30)
		maxPID, procs := int64(4194304), int64(100+5*len(out.Pods))
		out.Node.Rlimit = &stats.RlimitStats{Time: ts, MaxPID: &maxPID, NumOfRunningProcesses: &procs}
	}
	return out
}

// podStats renders one pod at instant t, its CPU and memory times scale;
// the fleet's lock is held.
func (f *Fleet) podStats(ps *podState, t instant, ts metav1.Time, onlyCPUAndMemory bool, scale uint64) stats.PodStats {
	var total sample
	limited := true
	pod := stats.PodStats{PodRef: stats.PodReference{Name: ps.pod.Name, Namespace: ps.pod.Namespace, UID: ps.pod.UID},
		StartTime: metav1.NewTime(f.tl.wall(ps.start)), Containers: make([]stats.ContainerStats, 0, len(ps.containers))}
	for _, c := range ps.containers {
		cs := sample{rate: scale * c.cpu.rate, cumulative: scale * c.cpu.at(t), workingSet: scale * c.memory, limit: c.limit}
		total.add(cs)
		limited = limited && c.limit > 0 // a pod is limited only if all its containers are
		stats := cs.stats(c.name, pod.StartTime, ts)
		if !onlyCPUAndMemory {
			stats.Rootfs = summarytest.Fs(ts, 4<<20)
			stats.Logs = summarytest.Fs(ts, 64<<10)
		}
		pod.Containers = append(pod.Containers, stats)
	}
	if !limited {
		total.limit = 0
	}
	sum := total.stats("", pod.StartTime, ts)
	pod.CPU, pod.Memory = sum.CPU, sum.Memory
	if !onlyCPUAndMemory {
		pod.Network = summarytest.Network(ts)
		pod.EphemeralStorage = summarytest.Fs(ts, uint64(len(ps.containers))*(4<<20+64<<10))
	}
	return pod
}

// instant is an offset from a timeline's epoch, from the clock's monotonic
// reading, so it never goes backwards.
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

// now returns the latest sample instant not after the clock's reading.
func (tl *timeline) now() instant {
	d := tl.clock.Since(tl.start) + tl.offset
	r := d % sampleInterval
	if r < 0 {
		r += sampleInterval
	}
	return instant(d - r)
}

func (tl *timeline) wall(i instant) time.Time { return tl.epoch.Add(time.Duration(i)) }

// counter integrates a CPU rate (nanocores) into core-nanoseconds.
type counter struct {
	acc   uint64  // value at accAt
	accAt instant // origin of the current segment
	rate  uint64  // nanocores since accAt
}

// at returns the counter's value at instant t (at the segment's start for
// instants before it).
func (c counter) at(t instant) uint64 {
	if t <= c.accAt {
		return c.acc
	}
	return c.acc + mulDiv(c.rate, uint64(t-c.accAt))
}

// setRate changes the rate from instant t on.
func (c *counter) setRate(t instant, rate uint64) {
	if t > c.accAt {
		c.acc, c.accAt = c.at(t), t
	}
	c.rate = rate
}

// mulDiv returns rate*ns/1e9 without overflow for realistic inputs.
func mulDiv(rate, ns uint64) uint64 {
	hi, lo := bits.Mul64(rate, ns)
	if hi >= 1e9 {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, 1e9)
	return q
}

// ResourceMetricsContentType is the Content-Type of GET /metrics/resource.
const ResourceMetricsContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

type family struct {
	name, help string
	kind       dto.MetricType
	labels     []string // sorted by name, as the exposition writes them
}

var (
	containerCPUFamily = family{"container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER, []string{"container", "namespace", "pod"}}
	containerMemFamily = family{"container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", dto.MetricType_GAUGE, []string{"container", "namespace", "pod"}}
	containerStart     = family{"container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE, []string{"container", "namespace", "pod"}}
	nodeCPUFamily      = family{"node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds", dto.MetricType_COUNTER, nil}
	nodeMemFamily      = family{"node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", dto.MetricType_GAUGE, nil}
	podCPUFamily       = family{"pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER, []string{"namespace", "pod"}}
	podMemFamily       = family{"pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", dto.MetricType_GAUGE, []string{"namespace", "pod"}}
	scrapeErrorFamily  = family{"resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE, nil}
)

// WriteResourceMetrics writes s as the kubelet's /metrics/resource does,
// with its registry's encoder (expfmt): families sorted by name, samples by
// label values, counters in seconds, timestamps in milliseconds, container
// start times without one.
func WriteResourceMetrics(w io.Writer, s *stats.Summary) error {
	byName := map[string]*dto.MetricFamily{}
	add := func(f family, v float64, ms *int64, values ...string) {
		mf := byName[f.name]
		if mf == nil {
			mf = &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: f.kind.Enum()}
			byName[f.name] = mf
		}
		m := &dto.Metric{TimestampMs: ms, Gauge: &dto.Gauge{Value: &v}}
		if f.kind == dto.MetricType_COUNTER {
			m.Counter, m.Gauge = &dto.Counter{Value: &v}, nil
		}
		for i := range f.labels {
			m.Label = append(m.Label, &dto.LabelPair{Name: &f.labels[i], Value: &values[i]})
		}
		mf.Metric = append(mf.Metric, m)
	}
	// usage adds a cgroup's CPU counter, in seconds, and working set.
	usage := func(cpuFamily, memFamily family, c *stats.CPUStats, m *stats.MemoryStats, values ...string) {
		if c != nil && c.UsageCoreNanoSeconds != nil {
			add(cpuFamily, float64(*c.UsageCoreNanoSeconds)/float64(time.Second), ptr.To(c.Time.UnixMilli()), values...)
		}
		if m != nil && m.WorkingSetBytes != nil {
			add(memFamily, float64(*m.WorkingSetBytes), ptr.To(m.Time.UnixMilli()), values...)
		}
	}
	usage(nodeCPUFamily, nodeMemFamily, s.Node.CPU, s.Node.Memory)
	for _, p := range s.Pods {
		ns, name := p.PodRef.Namespace, p.PodRef.Name
		for _, c := range p.Containers {
			if c.StartTime.Unix() > 0 {
				add(containerStart, float64(c.StartTime.UnixNano())/float64(time.Second), nil, c.Name, ns, name)
			}
			usage(containerCPUFamily, containerMemFamily, c.CPU, c.Memory, c.Name, ns, name)
		}
		usage(podCPUFamily, podMemFamily, p.CPU, p.Memory, ns, name)
	}
	add(scrapeErrorFamily, 0, nil)

	for _, name := range slices.Sorted(maps.Keys(byName)) {
		mf := byName[name]
		slices.SortStableFunc(mf.Metric, func(a, b *dto.Metric) int {
			return slices.CompareFunc(a.Label, b.Label, func(x, y *dto.LabelPair) int { return strings.Compare(x.GetValue(), y.GetValue()) })
		})
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}
