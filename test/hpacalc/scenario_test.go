package hpacalc

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

const (
	namespace = "inf"
	lwsName   = "web"
	window    = 15 * time.Second
)

// state is what a pod is doing when the HPA looks.
type state int

// States the HPA counts at face value: Ready with fresh metrics, whatever
// the samples behind them went through.
const (
	ready          state = iota // started an hour ago, Ready since
	readyInPeriod               // started 4 min ago, Ready for 2 min
	unreadyAgain                // Ready once, not Ready for 2 min, an hour old: the HPA counts its CPU
	restarted                   // containers restarted 10 s before the last sample
	restartedYoung              // restarted 2 s before the last sample: the previous rate stands
	drifted                     // start time moved forward, still before the previous sample
	driftedPast                 // start time jumped past the previous sample, counter kept
	faceValueStates
)

// States the HPA does not count at face value.
const (
	loading    state = faceValueStates + 1 + iota // started 1-4 min ago, not Ready
	justReady                                     // Ready 10 s ago: the sample's window began before
	neverReady                                    // started 10 min ago, never Ready
	pending                                       // not running yet
	noMetrics                                     // Running and Ready, node unreachable
	partial                                       // a container missing from the last scrape
	failed                                        // the HPA ignores it
	deleting                                      // the HPA ignores it
	allStates
)

var stateNames = [...]string{"ready", "readyInPeriod", "unreadyAgain", "restarted", "restartedYoung", "drifted", "driftedPast", "",
	"loading", "justReady", "neverReady", "pending", "noMetrics", "partial", "failed", "deleting"}

func (s state) String() string { return stateNames[s] }

// member is one pod of a scenario with its true usage.
type member struct {
	pod   *corev1.Pod
	state state
	// cpu (millicores) and memory (bytes) per running container.
	cpu, mem map[string]int64
}

type scenario struct {
	seed            int
	groups, size    int
	target          int32
	leaderT, worker corev1.PodSpec
	members         []member
	now             time.Time
}

func (s *scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d groups of %d, target %d%%\n  leader %s\n  worker %s\n", s.seed, s.groups, s.size, s.target, specString(s.leaderT), specString(s.worker))
	for _, m := range s.members {
		fmt.Fprintf(&b, "  %s %s cpu %v mem %v\n", m.pod.Name, m.state, m.cpu, m.mem)
	}
	return b.String()
}

// specString is the spec as JSON: its requests, pod-level requests,
// overhead and which init containers are sidecars.
func specString(s corev1.PodSpec) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// template draws a pod spec: container requests, pod-level requests (both,
// or memory only), overhead, sidecars and plain init containers.
func template(rng *rand.Rand) corev1.PodSpec {
	always := corev1.ContainerRestartPolicyAlways
	mode := rng.IntN(4) // 0 containers, 1 pod-level CPU and memory, 2 pod-level memory, 3 containers and overhead
	reqs := func(sidecar bool) corev1.ResourceList {
		r := corev1.ResourceList{}
		if mode != 1 {
			cpu := pick(rng, "100m", "250m", "500m", "1", "2", "4")
			if sidecar {
				cpu = pick(rng, "50m", "100m")
			}
			r[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mode == 0 || mode == 3 {
			r[corev1.ResourceMemory] = resource.MustParse(pick(rng, "128Mi", "512Mi", "1Gi", "4Gi"))
		}
		return r
	}
	var s corev1.PodSpec
	for i := range 1 + rng.IntN(2) {
		s.Containers = append(s.Containers, corev1.Container{Name: "c" + strconv.Itoa(i), Resources: corev1.ResourceRequirements{Requests: reqs(false)}})
	}
	if rng.IntN(3) == 0 {
		s.InitContainers = append(s.InitContainers, corev1.Container{Name: "fetch", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		}}})
	}
	if rng.IntN(3) == 0 {
		s.InitContainers = append(s.InitContainers, corev1.Container{Name: "proxy", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: reqs(true)}})
	}
	switch mode {
	case 1:
		s.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(pick(rng, "1", "2", "4", "8")),
			corev1.ResourceMemory: resource.MustParse(pick(rng, "2Gi", "8Gi")),
		}}
	case 2:
		s.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(pick(rng, "2Gi", "8Gi"))}}
	}
	if mode == 3 || (mode == 1 && rng.IntN(2) == 0) {
		s.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	}
	return s
}

// generate draws a scenario. Half of them are clean (every pod counts at
// face value, whatever its samples went through); in the others a pod in
// four is in any state.
func generate(seed int, now time.Time) *scenario {
	rng := rand.New(rand.NewPCG(uint64(seed), 13))
	s := &scenario{
		seed:    seed,
		groups:  1 + rng.IntN(4),
		size:    2 + rng.IntN(15),
		target:  pick[int32](rng, 30, 50, 70, 90),
		leaderT: template(rng),
		worker:  template(rng),
		now:     now,
	}
	dirty := rng.IntN(2) == 0
	for g := range s.groups {
		// Groups differ in load; members of a group around it.
		load := rng.IntN(101)
		for w := range s.size {
			st := ready
			switch r := rng.IntN(8); {
			case dirty && r < 2:
				st = state(int(faceValueStates) + 1 + rng.IntN(int(allStates-faceValueStates-1)))
			case r < 4:
				st = state(rng.IntN(int(faceValueStates)))
			}
			spec := s.worker
			if w == 0 {
				spec = s.leaderT
			}
			util := min(100, max(0, load+rng.IntN(41)-20))
			s.members = append(s.members, newMember(g, w, spec, st, util, rng.IntN(101), now))
		}
	}
	return s
}

// newMember builds the pod and its true usage: util percent of each
// running container's CPU share, memUtil percent of its memory share.
func newMember(g, w int, spec corev1.PodSpec, st state, util, memUtil int, now time.Time) member {
	name := fmt.Sprintf("%s-%d", lwsName, g)
	if w > 0 {
		name += "-" + strconv.Itoa(w)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{
			group.LabelName: lwsName, group.LabelGroupIndex: strconv.Itoa(g), group.LabelWorkerIndex: strconv.Itoa(w),
		}},
		Spec:   *spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	pod.Spec.NodeName = "node-" + name
	started, readyStatus, transition := now.Add(-time.Hour), corev1.ConditionTrue, now.Add(-59*time.Minute)
	switch st {
	case readyInPeriod:
		started, transition = now.Add(-4*time.Minute), now.Add(-2*time.Minute)
	case unreadyAgain:
		readyStatus, transition = corev1.ConditionFalse, now.Add(-2*time.Minute)
	case loading:
		started = now.Add(-time.Duration(60+(g*7+w*13)%180) * time.Second)
		readyStatus, transition = corev1.ConditionFalse, started
	case justReady:
		started, transition = now.Add(-3*time.Minute), now.Add(-10*time.Second)
	case neverReady:
		started = now.Add(-10 * time.Minute)
		readyStatus, transition = corev1.ConditionFalse, started.Add(5*time.Second)
	case pending:
		pod.Spec.NodeName = ""
		pod.Status.Phase = corev1.PodPending
	case failed:
		pod.Status.Phase = corev1.PodFailed
	case deleting:
		pod.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
	}
	if st != pending {
		st := metav1.NewTime(started)
		pod.Status.StartTime = &st
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: readyStatus, LastTransitionTime: metav1.NewTime(transition)}}
	}
	m := member{pod: pod, state: st, cpu: map[string]int64{}, mem: map[string]int64{}}
	running := runningContainers(pod)
	for _, c := range running {
		if group.IsSidecar(c) {
			pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
			})
		}
		m.cpu[c.Name] = share(pod, c, corev1.ResourceCPU, len(running)) * int64(util) / 100
		m.mem[c.Name] = share(pod, c, corev1.ResourceMemory, len(running)) / 1000 * int64(memUtil) / 100
	}
	return m
}

// share is a container's request for r in milli-units, or its part of the
// pod-level request when it has none.
func share(pod *corev1.Pod, c *corev1.Container, r corev1.ResourceName, n int) int64 {
	if q, ok := c.Resources.Requests[r]; ok {
		return q.MilliValue()
	}
	q := pod.Spec.Resources.Requests[r]
	return q.MilliValue() / int64(n)
}

func runningContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; group.IsSidecar(c) {
			out = append(out, c)
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// scrapes renders what three kubelet scrapes, one window apart and ending
// 5 s before now, report: the counters of a constant true usage, through
// the member's restarts and start-time drift. Nodes of pods without
// metrics are absent.
func (s *scenario) scrapes() (times [3]time.Time, batches [3]sources.Batch, nodes [3][]string) {
	last := s.now.Add(-5 * time.Second)
	times = [3]time.Time{last.Add(-2 * window), last.Add(-window), last}
	for i, t := range times {
		for _, m := range s.members {
			if m.state == noMetrics || m.state == pending {
				continue
			}
			node := m.pod.Spec.NodeName
			nodes[i] = append(nodes[i], node)
			pp := sources.PodPoint{Namespace: namespace, Name: m.pod.Name, UID: string(m.pod.UID), Node: node}
			for j, c := range runningContainers(m.pod) {
				if m.state == partial && i == 2 && j == 0 {
					continue
				}
				start := m.pod.Status.StartTime.Time
				counterStart := start
				if i == 2 {
					switch m.state {
					case restarted:
						start, counterStart = t.Add(-10*time.Second), t.Add(-10*time.Second)
					case restartedYoung:
						start, counterStart = t.Add(-2*time.Second), t.Add(-2*time.Second)
					case drifted:
						start = start.Add(30 * time.Minute)
					case driftedPast:
						start = t.Add(-10 * time.Second)
					}
				}
				// millicores × 1e6 = core-nanoseconds per second.
				counter := uint64(m.cpu[c.Name]) * 1e6 * uint64(t.Sub(counterStart)/time.Second)
				pp.Containers = append(pp.Containers, sources.ContainerPoint{Name: c.Name, Point: sources.Point{
					Timestamp: t, StartTime: start, CPUCoreNanos: counter, MemoryBytes: uint64(m.mem[c.Name]),
				}})
			}
			batches[i].Pods = append(batches[i].Pods, pp)
		}
	}
	return times, batches, nodes
}

// rawMetrics is every pod as metrics-server would serve it from its true
// usage: none for pods that are not running, whose node is unreachable, or
// with a container missing.
func (s *scenario) rawMetrics() []metricsv1beta1.PodMetrics {
	var out []metricsv1beta1.PodMetrics
	for _, m := range s.members {
		if !hasEndpointValue(m.state) {
			continue
		}
		pm := metricsv1beta1.PodMetrics{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: m.pod.Name, Labels: m.pod.Labels},
			Timestamp:  metav1.NewTime(s.now.Add(-5 * time.Second)),
			Window:     metav1.Duration{Duration: window},
		}
		for _, c := range runningContainers(m.pod) {
			pm.Containers = append(pm.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(m.cpu[c.Name], resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(m.mem[c.Name], resource.BinarySI),
			}})
		}
		out = append(out, pm)
	}
	return out
}
