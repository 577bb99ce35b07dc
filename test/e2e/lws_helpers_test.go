//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

const (
	lwsName                    = "infer"
	lwsGroupSize               = 4
	lwsCPURequest              = "100m"
	lwsMinGroups, lwsMaxGroups = 1, 3
	lwsTargetPercent           = 50
	// restMapperReset is how often kube-controller-manager forgets the kinds
	// it discovered: an HPA on a kind installed after it started may fail to
	// find the scale subresource until then.
	restMapperReset = 30 * time.Second
	// holdSyncPeriods is how many HPA syncs the pod policy must not scale.
	holdSyncPeriods = 5
)

// Usage per pod: the leaders stay at 10% of their request, the workers idle
// at 10% or run at 200%.
var (
	leaderUsage = fakekubelet.Usage{CPUNanoCores: 10e6, MemoryBytes: 32 << 20}
	workerIdle  = fakekubelet.Usage{CPUNanoCores: 10e6, MemoryBytes: 32 << 20}
	workerLoad  = fakekubelet.Usage{CPUNanoCores: 200e6, MemoryBytes: 32 << 20}
)

// lwsController is installed by the first test that needs it and runs until
// the cluster stops.
var lwsController struct {
	once sync.Once
	ctrl *lws.Controller
	err  error
}

// lwsBounds bound the waits of the LWS tests: running, until the LWS's
// pods are Running after a load change; hold, the window over which the pod
// policy must not scale.
type lwsBounds struct {
	hpaBounds
	running, hold time.Duration
}

func newLWSBounds() lwsBounds {
	b := lwsBounds{hpaBounds: newHPABounds()}
	b.read += restMapperReset
	b.running = b.up + hpaSlack
	b.hold = staleBound() + holdSyncPeriods*suite.opts.HPASyncPeriod
	return b
}

// lwsEnv is what the LWS tests share.
type lwsEnv struct {
	dyn     dynamic.Interface
	metrics metricsclient.Interface
	bounds  lwsBounds
	watch   []*cluster.Process // whose exit ends a wait
}

func newLWSEnv(ctx context.Context, t *testing.T) *lwsEnv {
	t.Helper()
	lwsController.once.Do(func() {
		began := time.Now()
		lwsController.ctrl, lwsController.err = lws.Install(ctx, suite.cluster, suite.binDir)
		if lwsController.err == nil {
			t.Logf("LWS controller installed and ready in %v", since(began))
		}
	})
	if lwsController.err != nil {
		t.Fatal(lwsController.err)
	}
	dyn, err := dynamic.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	mc, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	return &lwsEnv{dyn: dyn, metrics: mc, bounds: newLWSBounds(), watch: append(watched(), lwsController.ctrl.Process())}
}

// poll is cluster.Poll over e.watch, bounded by d.
func (e *lwsEnv) poll(ctx context.Context, d time.Duration, what string, check func(context.Context) error) error {
	return boundedPoll(ctx, d, what, e.watch, check)
}

// deployCustomMetricsServer deploys a second server from
// manifests/custom-metrics, which takes over the Service and the
// metrics.k8s.io APIServices and adds the custom.metrics.k8s.io ones. When
// the test ends they go back to the suite's server.
func deployCustomMetricsServer(ctx context.Context, t *testing.T, name string) *env.Server {
	t.Helper()
	s := deployOwnServer(ctx, t, name, nil, repoPath(t, "manifests", "custom-metrics"))
	t.Logf("APIServices of %s: %s", name, strings.Join(s.APIServices, ", "))
	return s
}

// workerTarget selects the workers of the LWS lwsName in ns.
func workerTarget(ns string) fakekubelet.UsageTarget {
	sel, err := labels.Parse(group.LabelName + "=" + lwsName + "," + group.LabelWorkerIndex + "!=0")
	if err != nil {
		panic(err)
	}
	return fakekubelet.UsageTarget{Namespace: ns, Selector: sel}
}

// createLWS sets the fleet's usage for the LWS's pods, creates it with one
// group and waits until the group's pods are Running.
func (e *lwsEnv) createLWS(ctx context.Context, t *testing.T, ns string, leaderAnnotations map[string]string, workers fakekubelet.Usage) {
	t.Helper()
	leaders := labels.SelectorFromSet(labels.Set{group.LabelName: lwsName, group.LabelWorkerIndex: "0"})
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: leaders}, leaderUsage)
	suite.fleet.SetUsage(workerTarget(ns), workers)
	e.createGroup(ctx, t, lws.NewLeaderWorkerSet(ns, lwsName, lwsMinGroups, lwsGroupSize, lwsCPURequest, leaderAnnotations), lwsGroupSize)
}

// createGroup creates obj, a LeaderWorkerSet of one group of size pods, and
// waits until its pods are Running.
func (e *lwsEnv) createGroup(ctx context.Context, t *testing.T, obj *unstructured.Unstructured, size int) {
	t.Helper()
	ns, name := obj.GetNamespace(), obj.GetName()
	began := time.Now()
	if _, err := e.dyn.Resource(lws.GroupVersionResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create LeaderWorkerSet: %v", err)
	}
	pods, err := e.waitPods(ctx, ns, name, size, e.bounds.running)
	must(t, err)
	t.Logf("LeaderWorkerSet %s/%s: %d pods Running %v after it was created", ns, name, len(pods), since(began))
}

// waitPods waits, for at most d, until exactly n pods of the LWS name in ns
// are Running.
func (e *lwsEnv) waitPods(ctx context.Context, ns, name string, n int, d time.Duration) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return env.WaitForRunningPods(ctx, suite.cluster.Client(), ns, labels.SelectorFromSet(labels.Set{group.LabelName: name}), n)
}

func (e *lwsEnv) createHPA(ctx context.Context, ns string, metric autoscalingv2.MetricSpec) error {
	return createHPA(ctx, newHPA(ns, lwsRef(lwsName), lwsMinGroups, lwsMaxGroups, metric))
}

// waitReading waits until the HPA name in ns reads want (any value when
// want < 0) and returns what it read.
func (e *lwsEnv) waitReading(ctx context.Context, t *testing.T, ns, name string, want int64, d time.Duration) int64 {
	t.Helper()
	var got int64
	must(t, e.poll(ctx, d, fmt.Sprintf("HPA %s/%s to read %d", ns, name, want), func(ctx context.Context) error {
		hpa, err := getHPA(ctx, ns, name)
		if err != nil {
			return err
		}
		var ok bool
		if got, ok = hpaReading(hpa); !ok || (want >= 0 && got != want) {
			return fmt.Errorf("reading %d (read: %v); conditions %s", got, ok, conditions(hpa))
		}
		return nil
	}))
	return got
}

// waitScale waits, for at most d, until the LWS name in ns wants groups
// groups, logging each change, and returns how long that took; hpaName is
// the HPA whose state a timeout reports.
func (e *lwsEnv) waitScale(ctx context.Context, t *testing.T, ns, name, hpaName string, groups int32, d time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	last := int32(-1)
	must(t, e.poll(ctx, d, fmt.Sprintf("LeaderWorkerSet %s/%s to want %d groups", ns, name, groups), func(ctx context.Context) error {
		scale, err := lws.GetScale(ctx, e.dyn, ns, name)
		if err != nil {
			return err
		}
		if scale.Spec.Replicas != last {
			t.Logf("  %v: %s wants %d groups", since(began), name, scale.Spec.Replicas)
			last = scale.Spec.Replicas
		}
		if scale.Spec.Replicas != groups {
			hpa, err := getHPA(ctx, ns, hpaName)
			if err == nil {
				err = fmt.Errorf("replicas %d; HPA desired %d, conditions %s", scale.Spec.Replicas, hpa.Status.DesiredReplicas, conditions(hpa))
			}
			return err
		}
		return nil
	}))
	return time.Since(began)
}

// holdGroups fails the test if, at any reading every half HPA sync period
// for d, the LWS name in ns wants other than groups groups; the failure
// gives the state of the HPA hpaName.
func (e *lwsEnv) holdGroups(ctx context.Context, t *testing.T, ns, name, hpaName string, groups int32, d time.Duration) {
	t.Helper()
	holdCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	every(holdCtx, suite.opts.HPASyncPeriod/2, func() {
		scale, err := lws.GetScale(ctx, e.dyn, ns, name)
		must(t, err)
		if scale.Spec.Replicas != groups {
			t.Fatalf("LeaderWorkerSet %s/%s wants %d groups, want %d held; %s", ns, name, scale.Spec.Replicas, groups, hpaState(ctx, ns, hpaName))
		}
	})
	if err := ctx.Err(); err != nil {
		t.Fatal(err)
	}
}

// waitWorkerCPU waits until the metrics API, through the aggregator, reports
// every worker of the LWS in ns at the CPU the fleet was told (within 5%,
// since a first sample may read up to a second low).
func (e *lwsEnv) waitWorkerCPU(ctx context.Context, ns string, nanoCores uint64) error {
	want := resource.NewScaledQuantity(int64(nanoCores), resource.Nano)
	return e.poll(ctx, e.bounds.up, "the workers' metrics to show "+want.String(), func(ctx context.Context) error {
		list, err := e.metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{LabelSelector: workerTarget(ns).Selector.String()})
		if err != nil {
			return err
		}
		if len(list.Items) != lwsGroupSize-1 {
			return fmt.Errorf("%d workers with metrics", len(list.Items))
		}
		for _, m := range list.Items {
			var cpu int64
			for _, c := range m.Containers {
				cpu += c.Usage.Cpu().ScaledValue(resource.Nano)
			}
			if float64(cpu) < 0.95*float64(nanoCores) {
				return fmt.Errorf("worker %s at %dn", m.Name, cpu)
			}
		}
		return nil
	})
}

// waitGroupMetrics waits until every pod of groups groups of the LWS in ns
// has metrics through the aggregator and every leader's PodMetrics names
// policy and covers its whole group (policy "" for the pod policy, whose
// leaders carry no annotations).
func (e *lwsEnv) waitGroupMetrics(ctx context.Context, ns string, groups int, policy string) error {
	wantAnnotations := map[string]string{}
	if size := strconv.Itoa(lwsGroupSize); policy != "" {
		wantAnnotations = map[string]string{
			group.AnnotationReportedPolicy: policy, group.AnnotationCovered: size, group.AnnotationMembers: size,
		}
	}
	what := fmt.Sprintf("every pod of %d groups to have metrics", groups)
	return e.poll(ctx, e.bounds.up, what, func(ctx context.Context) error {
		list, err := e.metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != groups*lwsGroupSize {
			return fmt.Errorf("%d pods with metrics", len(list.Items))
		}
		for _, m := range list.Items {
			if m.Labels[group.LabelWorkerIndex] != "0" {
				continue
			}
			for k, v := range wantAnnotations {
				if m.Annotations[k] != v {
					return fmt.Errorf("leader %s: annotations %v, want %v", m.Name, m.Annotations, wantAnnotations)
				}
			}
		}
		return nil
	})
}
