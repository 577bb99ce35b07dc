package hpacalc

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsfake "k8s.io/metrics/pkg/client/clientset/versioned/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// scenarios is how many seeded scenarios run; each is read for CPU and
// for memory.
const scenarios = 400

// kube-controller-manager's defaults, on both sides.
const (
	cpuInitializationPeriod = 5 * time.Minute
	initialReadinessDelay   = 30 * time.Second
)

// reading is what one run of the HPA's calculator gave: the desired
// replicas and the current value it read, a utilization in percent
// (Resource) or an average in milli-units (Pods).
type reading struct {
	replicas int32
	usage    int64
	err      error
}

func (r reading) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d replicas at %d", r.replicas, r.usage)
}

// direction is -1, 0 or 1: scale down, stay, scale up. An error keeps the
// current scale, as the HPA does.
func (r reading) direction(current int32) int {
	switch {
	case r.err != nil || r.replicas == current:
		return 0
	case r.replicas > current:
		return 1
	}
	return -1
}

// TestHPACalculatorTwice runs the HPA's ReplicaCalculator on each scenario
// twice: (A) on the leaders, with what this server's provider serves under
// the group policy from the scenario's kubelet samples; (B) on every pod,
// with its true usage, as one Deployment would present them.
//
// Equivalence, per scenario and resource:
//
//   - When every pod counts at face value (Ready as the HPA counts pods,
//     fresh metrics; restarts and start-time drift in the samples
//     included), A must read the same utilization as B, or one point off
//     (the HPA truncates each side's ratio to a whole percent, and a
//     leader's value is a whole number of millicores), and decide the same
//     scale: A's desired groups equal B's desired pods rounded up to whole
//     groups, unless one side sits exactly on the target. Exact: the same
//     utilization and the same desired groups.
//   - Otherwise some leader has no value (a member Pending, not ready,
//     without fresh metrics, failed or being deleted), and A must be at
//     least as conservative as B: it stays, or moves the way B moves. This
//     holds while no pod uses more than max(100%, target) of its request,
//     the HPA's own assumption for pods without metrics; the scenarios keep
//     usage within requests.
func TestHPACalculatorTwice(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	var faceValue, exact, rounding, withheld, withheldSame int
	for seed := range scenarios {
		s := generate(seed, now)
		p, lister := serve(t, s)
		a, held := leaderMetrics(t, p, s)
		b := s.rawMetrics()
		all := labels.SelectorFromSet(labels.Set{group.LabelName: lwsName})
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			gotA := calculate(lister, a, int32(s.groups), s.target, r, leaders, true)
			gotB := calculate(lister, b, int32(s.groups*s.size), s.target, r, all, true)
			dirA, dirB := gotA.direction(int32(s.groups)), gotB.direction(int32(s.groups*s.size))
			report := func(format string, args ...any) {
				t.Errorf("%s: %s\n  A (leaders): %s, direction %d\n  B (all pods): %s, direction %d\n%s",
					r, fmt.Sprintf(format, args...), gotA, dirA, gotB, dirB, s)
			}
			if held == 0 {
				faceValue++
				if gotA.err != nil || gotB.err != nil {
					report("an error with every pod at face value")
					continue
				}
				diff := gotA.usage - gotB.usage
				onTarget := gotA.usage == int64(s.target) || gotB.usage == int64(s.target)
				sameScale := gotA.replicas == (gotB.replicas+int32(s.size)-1)/int32(s.size)
				switch {
				case diff == 0 && sameScale:
					exact++
				case diff >= -1 && diff <= 1 && (sameScale || onTarget):
					rounding++
				default:
					report("utilization or direction differs")
				}
				continue
			}
			withheld++
			switch {
			case dirA == dirB:
				withheldSame++
			case dirA != 0:
				report("%d leaders without a value, and A moves where B does not", held)
			}
		}
	}
	t.Logf("%d scenarios, %d cases (CPU and memory each): %d with every pod at face value, of which %d exact and %d one point off; %d with a leader withheld, all at least as conservative, %d of them taking B's direction",
		scenarios, 2*scenarios, faceValue, exact, rounding, withheld, withheldSame)
}

// leaders selects the leader of every group.
var leaders = labels.SelectorFromSet(labels.Set{group.LabelName: lwsName, group.LabelWorkerIndex: "0"})

// serve feeds the scenario's scrapes to the server's store and returns the
// server's provider under the group policy, and a lister of the full pods
// for the HPA.
func serve(t *testing.T, s *scenario) (*provider.Provider, corelisters.PodLister) {
	t.Helper()
	clk := clocktesting.NewFakeClock(s.now)
	st := store.New(store.Config{Clock: clk, Sources: []string{"kubelet"}, FirstWindowMax: 2 * window, StaleAfter: 2*window + 10*time.Second})
	times, batches, nodes := s.scrapes()
	for i := range times {
		st.Store("kubelet", nodes[i], &batches[i], times[i])
	}
	idx := podcache.NewPodIndex()
	full := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, m := range s.members {
		trimmed, err := podcache.TrimPod(m.pod)
		if err != nil {
			t.Fatal(err)
		}
		idx.Set(trimmed.(*podcache.Pod))
		if err := full.Add(m.pod); err != nil {
			t.Fatal(err)
		}
	}
	p := provider.New(provider.Config{
		Pods: idx, Nodes: podcache.NewNodeIndex(), Usage: st, Clock: clk, Groups: true, DefaultPolicy: group.PolicyGroup,
		Readiness: group.Readiness{CPUInitializationPeriod: cpuInitializationPeriod, InitialReadinessDelay: initialReadinessDelay},
	})
	return p, corelisters.NewPodLister(full)
}

// leaderMetrics lists the leaders through p's metrics.k8s.io view. It
// returns those metrics and how many leaders have no value.
func leaderMetrics(t *testing.T, p *provider.Provider, s *scenario) ([]metricsv1beta1.PodMetrics, int) {
	t.Helper()
	list, err := p.ListPodMetrics(context.Background(), namespace, leaders, fields.Everything())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]metricsv1beta1.PodMetrics, len(list))
	for i := range list {
		if err := metricsv1beta1.Convert_metrics_PodMetrics_To_v1beta1_PodMetrics(&list[i], &out[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	return out, s.groups - len(list)
}

// calculate runs the HPA's own calculator on metrics, as the HPA controller
// reads them through its REST metrics client, with kube-controller-manager's
// default readiness periods, or with both zero: the readiness rule off, as
// the HPA counts pods for any metric but Resource CPU (every Running pod with
// a value at face value). Tolerances are zero: their fields are the
// controller's own, and zero is the strictest comparison.
func calculate(lister corelisters.PodLister, metrics []metricsv1beta1.PodMetrics, current, target int32, r corev1.ResourceName, sel labels.Selector, readiness bool) reading {
	client := &metricsfake.Clientset{}
	client.AddReactor("list", "pods", func(action core.Action) (bool, runtime.Object, error) {
		want := action.(core.ListAction).GetListRestrictions().Labels
		out := &metricsv1beta1.PodMetricsList{}
		for _, m := range metrics {
			if want.Matches(labels.Set(m.Labels)) {
				out.Items = append(out.Items, m)
			}
		}
		return true, out, nil
	})
	initPeriod, readinessDelay := cpuInitializationPeriod, initialReadinessDelay
	if !readiness {
		initPeriod, readinessDelay = 0, 0
	}
	calc := podautoscaler.NewReplicaCalculator(metricsclient.NewRESTMetricsClient(client.MetricsV1beta1(), nil, nil),
		lister, initPeriod, readinessDelay)
	replicas, util, _, _, err := calc.GetResourceReplicas(context.Background(), current, target, r, podautoscaler.Tolerances{}, namespace, sel, "")
	return reading{replicas: replicas, usage: int64(util), err: err}
}
