//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

const (
	// haLoadDuration is how long clients list through the aggregator while
	// one replica is killed, once every client has had ten answers.
	haLoadDuration = 30 * time.Second
	haClients      = 8
)

// TestHighAvailability runs manifests/high-availability's replicas on one port
// (SO_REUSEPORT) and stops one with SIGKILL, then one with SIGTERM, under load.
func TestHighAvailability(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	const ns = "e2e-ha"
	newNamespace(ctx, t, ns)
	spec := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 6, Containers: []string{"app", "sidecar"}, CPURequest: "100m"}
	pods, want := runDeployment(ctx, t, spec, fakekubelet.Usage{CPUNanoCores: 70_000_001, MemoryBytes: 40<<20 + 4321})
	// Nothing changes these pods' usage from here on.
	settled := time.Now()

	dir := repoPath(t, "manifests", "high-availability")
	replicas := int(ptr.Deref(manifestDeployment(ctx, t, dir).Spec.Replicas, 1))
	if replicas < 2 {
		t.Fatalf("manifests/high-availability runs %d replicas, want at least 2", replicas)
	}
	deletePDBAtEnd(t)
	s := deployOwnServer(ctx, t, "group-metrics-server-ha-0", []string{env.PermitPortSharing}, dir)
	procs := []*cluster.Process{s.Process}
	for i := 1; i < replicas; i++ {
		p, err := s.StartAgain(fmt.Sprintf("group-metrics-server-ha-%d", i))
		must(t, err)
		t.Cleanup(func() { _ = p.Stop() })
		procs = append(procs, p)
	}
	pinned := connectReplicas(ctx, t, s, procs)

	compareReplicas(ctx, t, s, procs, pinned, ns, want, settled)
	shapes := []shape{listAllPods(), listSelected(ns, spec.Selector().String()), getPod(ns, pods[0].Name)}
	victim := stopDuringLoad(ctx, t, procs, pinned, shapes, syscall.SIGKILL)

	// Replace it, then stop the replica now serving the aggregator as a
	// rolling update or a drain would: SIGTERM.
	i := slices.Index(procs, victim)
	p, err := s.StartAgain(victim.Name() + "-replaced")
	must(t, err)
	t.Cleanup(func() { _ = p.Stop() })
	procs[i] = p
	pinned = connectReplicas(ctx, t, s, procs)
	victim = stopDuringLoad(ctx, t, procs, pinned, shapes, syscall.SIGTERM)
	if err := victim.Err(); err != nil {
		t.Errorf("%s exited after SIGTERM: %v, want status 0", victim.Name(), err)
	}
}

// manifestDeployment returns the server's Deployment in the
// kustomization dir.
func manifestDeployment(ctx context.Context, t *testing.T, dir string) *appsv1.Deployment {
	t.Helper()
	objs, err := env.Render(ctx, suite.cluster, dir)
	must(t, err)
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "Deployment" && o.GetName() == serverDeployment
	})
	if i < 0 {
		t.Fatalf("%s renders no Deployment %s", dir, serverDeployment)
	}
	d := &appsv1.Deployment{}
	must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(objs[i].Object, d))
	return d
}

// deletePDBAtEnd deletes, when the test ends, the PodDisruptionBudget
// manifests/high-availability adds, which the suite's server does not have.
func deletePDBAtEnd(t *testing.T) {
	cleanup(t, "delete the PodDisruptionBudget", func(ctx context.Context) error {
		pdbs := suite.cluster.Client().PolicyV1().PodDisruptionBudgets("kube-system")
		return ignoreNotFound(pdbs.Delete(ctx, "group-metrics-server", metav1.DeleteOptions{}))
	})
}

// connectReplicas returns a client pinned to each replica, once each is
// ready.
func connectReplicas(ctx context.Context, t *testing.T, s *env.Server, procs []*cluster.Process) map[*cluster.Process]endpoint {
	t.Helper()
	var pinned map[*cluster.Process]endpoint
	// Each connection reaches one of the replicas listening, so 32
	// connections miss one of two with probability 2^-31.
	must(t, cluster.Poll(ctx, "a connection to every replica", procs, func(ctx context.Context) (err error) {
		pinned, err = pinnedEndpoints(ctx, s, procs, 32)
		return err
	}))
	t.Cleanup(func() {
		for _, c := range pinned {
			c.client.CloseIdleConnections()
		}
	})
	for p, c := range pinned {
		must(t, cluster.Poll(ctx, p.Name()+" to be ready", procs, func(ctx context.Context) error {
			code, body, err := env.Get(ctx, c.client, c.base+"/readyz")
			if err == nil && code != 200 {
				err = fmt.Errorf("/readyz %d: %s", code, body)
			}
			return err
		}))
	}
	return pinned
}

// stopMargin is how long after a stopped replica was reaped a request may
// still meet it: the aggregator learns that its connection was reset when
// its reading goroutine runs, which on a loaded machine can take a moment.
const stopMargin = time.Second

// stopDuringLoad lists through the aggregator from haClients clients for
// haLoadDuration and, once every client has had ten answers, sends sig to
// the replica that served most of those requests, and returns it once it
// has exited. Only requests that meet the replica while it goes away may
// fail: those in flight on it, and connections the aggregator opens to its
// listener before the kernel has closed it. Any request sent more than
// stopMargin after the process was reaped must succeed.
func stopDuringLoad(ctx context.Context, t *testing.T, procs []*cluster.Process, pinned map[*cluster.Process]endpoint, shapes []shape, sig syscall.Signal) *cluster.Process {
	t.Helper()
	// The metrics.k8s.io requests each replica has counted (0 before the
	// first).
	counts := func() map[*cluster.Process]float64 {
		out := map[*cluster.Process]float64{}
		for _, p := range procs {
			body, err := selfMetrics(ctx, pinned[p])
			if err == nil {
				out[p], _, err = promtext.Value(body, "apiserver_request_total", `group="metrics.k8s.io"`)
			}
			if err != nil {
				t.Fatalf("%s: %v", p.Name(), err)
			}
		}
		return out
	}
	before := counts()
	agg := aggregatorEndpoint(t, suite.cluster)
	var (
		wg       sync.WaitGroup
		results  []result
		answered atomic.Int64
	)
	began := time.Now()
	wg.Go(func() { results = runLoadCounting(ctx, []endpoint{agg}, shapes, haClients, haLoadDuration, &answered) })
	// The victim is the replica that served most once every client has had
	// ten answers; the rest of the run comes after the signal.
	must(t, waitAnswered(ctx, &answered, 10*haClients, haLoadDuration/3))
	during := counts()
	var victim *cluster.Process
	var served []string
	for _, p := range procs {
		d := during[p] - before[p]
		served = append(served, fmt.Sprintf("%s %.0f", p.Name(), d))
		if victim == nil || d > during[victim]-before[victim] {
			victim = p
		}
	}
	killedAt := time.Now()
	must(t, syscall.Kill(victim.Pid(), sig))
	select {
	case <-victim.Done():
	case <-time.After(exitBound()):
		t.Fatalf("%s still running %v after %v", victim.Name(), exitBound(), sig)
	}
	reaped := time.Now()
	wg.Wait()
	elapsed := time.Since(began)

	var survivors []string
	for _, p := range procs {
		if p == victim {
			continue
		}
		survivors = append(survivors, p.Name())
		select {
		case <-p.Done():
			t.Errorf("%s exited: %v", p.Name(), p.Err())
		default:
		}
	}
	var failed, late, refused []string
	afterKill := 0
	for _, r := range results {
		if !r.failed() {
			if r.start.After(killedAt) {
				afterKill++
			}
			continue
		}
		f := fmt.Sprintf("%v (sent %v after the signal)", r, r.start.Sub(killedAt).Round(time.Microsecond))
		failed = append(failed, f)
		if r.start.After(reaped.Add(stopMargin)) {
			late = append(late, f)
		}
		// A replica stopped with SIGTERM drains: the aggregator's
		// connection gets a GOAWAY after the listener has closed, so its
		// next requests reach another replica. Only a request that arrives
		// between the start of the drain and the GOAWAY may be answered
		// with Retry-After (k8s.io/apiserver's 503 "shutting down", or the
		// read limit's 429), which clients retry.
		if sig == syscall.SIGTERM && r.retryAfter == "" {
			refused = append(refused, f)
		}
	}
	t.Logf("%v: %d clients through the aggregator for %v: %d requests, %d failed; requests served by each replica before the signal: %s; %s reaped %v after the signal, %d requests succeeded after it (served by %s)\n%s",
		sig, haClients, elapsed.Round(time.Millisecond), len(results), len(failed), strings.Join(served, ", "), victim.Name(), reaped.Sub(killedAt).Round(time.Millisecond),
		afterKill, strings.Join(survivors, ", "), formatStats(summarize(results), elapsed))
	if len(failed) > 0 {
		t.Logf("failed requests:\n%s", strings.Join(failed, "\n"))
	}
	if len(refused) > 0 {
		t.Errorf("%d requests failed while %s drained without being told to retry:\n%s", len(refused), victim.Name(), strings.Join(refused, "\n"))
	}
	if len(late) > 0 {
		t.Errorf("%d requests sent more than %v after %s was reaped failed:\n%s", len(late), stopMargin, victim.Name(), strings.Join(late, "\n"))
	}
	if afterKill == 0 {
		t.Errorf("no request succeeded after %s was stopped", victim.Name())
	}
	return victim
}

// compareReplicas waits until every replica serves every pod of want with
// a window that began after settled, and checks they serve the same pods and
// nodes with the same values: the fleet's usage is constant, so the replicas'
// rates agree within cpuTolerance (see differential_test.go) although they
// scrape at different instants.
func compareReplicas(ctx context.Context, t *testing.T, s *env.Server, procs []*cluster.Process, pinned map[*cluster.Process]endpoint, ns string, want []string, settled time.Time) {
	t.Helper()
	began := time.Now()
	snaps := make([]metricsSnapshot, len(procs))
	// Two scrapes after settled give every replica a window that starts
	// after it; the slack covers a loaded machine.
	bound := 2*(suite.resolution+suite.timeout) + 20*time.Second
	must(t, boundedPoll(ctx, bound, "the replicas to serve every pod from settled windows", procs, func(ctx context.Context) error {
		for i, p := range procs {
			c := pinned[p]
			mc, err := metricsclient.NewForConfigAndClient(s.RESTConfig(), c.client)
			var snap metricsSnapshot
			if err == nil {
				snap, err = snapshot(ctx, mc)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			snap = snap.only(func(k string) bool { return strings.HasPrefix(k, ns+"/") || isNode(k) })
			if got, err := replicaOf(ctx, c, procs); err != nil || got != p {
				return fmt.Errorf("the connection to %s moved: %w", p.Name(), err)
			}
			for _, k := range want {
				if _, ok := snap[k]; !ok {
					return fmt.Errorf("%s does not serve %s yet", p.Name(), k)
				}
			}
			// Nodes sum every pod on them, including those of other tests
			// that may still be going away.
			pods := snap.only(func(k string) bool { return !isNode(k) })
			if err := pods.settledSince(settled); err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			snaps[i] = snap
		}
		return nil
	}))
	for i := 1; i < len(snaps); i++ {
		report, err := comparison{a: procs[0].Name(), b: procs[i].Name(), podsOnly: true}.compare(snaps[0], snaps[i])
		if err != nil {
			t.Errorf("%s vs %s: %v", procs[0].Name(), procs[i].Name(), err)
		}
		t.Logf("%s vs %s, %v after the first check:\n%s", procs[0].Name(), procs[i].Name(), time.Since(began).Round(time.Millisecond), report)
	}
}
