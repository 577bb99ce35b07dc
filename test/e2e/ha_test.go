//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

const (
	// haLoadDuration is how long clients list through the aggregator while
	// one replica is killed, a third of the way in.
	haLoadDuration = 30 * time.Second
	haClients      = 8
)

// TestHighAvailability runs the replicas of manifests/high-availability
// behind the Service: every replica binds the same loopback address and
// port (SO_REUSEPORT), as the aggregator dials the Service's host,
// localhost, and the kernel spreads connections over them. Both replicas
// serve the same pods with the same values. While clients list through the
// aggregator, the replica serving it is killed (SIGKILL): only requests that
// meet it as it goes fail, and the other replica serves the rest; then its
// replacement takes over from the other one stopped with SIGTERM, with no
// failure but 429s clients retry.
func TestHighAvailability(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	const ns = "e2e-ha"
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	spec := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 6, Containers: []string{"app", "sidecar"}, CPURequest: "100m"}
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: spec.Selector()}, fakekubelet.Usage{CPUNanoCores: 70_000_001, MemoryBytes: 40<<20 + 4321})
	if err := env.CreateDeployment(ctx, client, spec); err != nil {
		t.Fatal(err)
	}
	pods, err := env.WaitForRunningPods(ctx, client, ns, spec.Selector(), int(spec.Replicas))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing changes these pods' usage from here on.
	settled := time.Now()
	var want []string
	for _, p := range pods {
		want = append(want, ns+"/"+p.Name)
	}

	root, err := env.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "manifests", "high-availability")
	replicas := manifestReplicas(ctx, t, dir)
	if replicas < 2 {
		t.Fatalf("manifests/high-availability runs %d replicas, want at least 2", replicas)
	}
	t.Cleanup(func() { deletePDB(t) })
	s := deployOwnServer(ctx, t, "group-metrics-server-ha-0", []string{env.PermitPortSharing}, dir)
	procs := []*cluster.Process{s.Process}
	for i := 1; i < replicas; i++ {
		p, err := s.StartAgain(suite.binDir, fmt.Sprintf("group-metrics-server-ha-%d", i))
		if err != nil {
			t.Fatal(err)
		}
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
	p, err := s.StartAgain(suite.binDir, victim.Name()+"-replaced")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	procs[i] = p
	pinned = connectReplicas(ctx, t, s, procs)
	victim = stopDuringLoad(ctx, t, procs, pinned, shapes, syscall.SIGTERM)
	if err := victim.Err(); err != nil {
		t.Errorf("%s exited after SIGTERM: %v, want status 0", victim.Name(), err)
	}
}

// manifestReplicas returns the replicas of the Deployment in the
// kustomization dir.
func manifestReplicas(ctx context.Context, t *testing.T, dir string) int {
	t.Helper()
	objs, err := env.Render(ctx, suite.cluster, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		// JSON numbers decode as float64, YAML ones as int64.
		switch n := o.Object["spec"].(map[string]any)["replicas"].(type) {
		case int64:
			return int(n)
		case float64:
			return int(n)
		default:
			t.Fatalf("deployment %s: spec.replicas is %T", o.GetName(), n)
		}
	}
	t.Fatalf("%s renders no Deployment", dir)
	return 0
}

// deletePDB deletes the PodDisruptionBudget manifests/high-availability
// adds, which the suite's server does not have.
func deletePDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(suite.ctx, 30*time.Second)
	defer cancel()
	err := suite.cluster.Client().PolicyV1().PodDisruptionBudgets("kube-system").Delete(ctx, "group-metrics-server", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete the PodDisruptionBudget: %v", err)
	}
}

// connectReplicas returns a client pinned to each replica, once each is
// ready.
func connectReplicas(ctx context.Context, t *testing.T, s *env.Server, procs []*cluster.Process) map[*cluster.Process]*env.PinnedClient {
	t.Helper()
	var pinned map[*cluster.Process]*env.PinnedClient
	err := env.Poll(ctx, "a connection to every replica", procs, func(ctx context.Context) error {
		var err error
		// Each connection reaches one of the replicas listening, so 32
		// connections miss one of two with probability 2^-31.
		pinned, err = s.PinnedClients(ctx, procs, 32)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range pinned {
			c.Close()
		}
	})
	for p, c := range pinned {
		err := env.Poll(ctx, p.Name()+" to be ready", procs, func(ctx context.Context) error {
			code, body, err := env.Get(ctx, c.Client, c.Base+"/readyz")
			if err == nil && code != 200 {
				err = fmt.Errorf("/readyz %d: %s", code, body)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pinned
}

// compareReplicas waits until every replica serves every pod of want with
// a window that began after settled, and checks they serve the same pods and
// nodes with the same values: the fleet's usage is constant, so the replicas'
// rates agree within cpuTolerance (see differential_test.go) although they
// scrape at different instants.
func compareReplicas(ctx context.Context, t *testing.T, s *env.Server, procs []*cluster.Process, pinned map[*cluster.Process]*env.PinnedClient, ns string, want []string, settled time.Time) {
	t.Helper()
	began := time.Now()
	snaps := make([]metricsSnapshot, len(procs))
	// Two scrapes after settled give every replica a window that starts
	// after it; the slack covers a loaded machine.
	bound := 2*(suite.resolution+suite.timeout) + 20*time.Second
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := env.Poll(cctx, "the replicas to serve every pod from settled windows", procs, func(ctx context.Context) error {
		for i, p := range procs {
			c := pinned[p]
			mc, err := metricsclient.NewForConfigAndClient(s.RESTConfig(), c.Client)
			if err != nil {
				return err
			}
			snap, err := nsSnapshot(ctx, mc, ns)
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			if got, err := c.Replica(ctx, procs); err != nil || got != p {
				return fmt.Errorf("the connection to %s moved: %w", p.Name(), err)
			}
			for _, k := range want {
				if _, ok := snap[k]; !ok {
					return fmt.Errorf("%s does not serve %s yet", p.Name(), k)
				}
			}
			if err := snap.podsSettledSince(settled); err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			snaps[i] = snap
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(snaps); i++ {
		report, err := compareReplicaSnapshots(snaps[0], snaps[i])
		if err != nil {
			t.Errorf("%s vs %s: %v", procs[0].Name(), procs[i].Name(), err)
		}
		t.Logf("%s vs %s, %v after the first check:\n%s", procs[0].Name(), procs[i].Name(), time.Since(began).Round(time.Millisecond), report)
	}
}

// nsSnapshot is snapshot for the pods of ns and every node.
func nsSnapshot(ctx context.Context, c metricsclient.Interface, ns string) (metricsSnapshot, error) {
	all, err := snapshot(ctx, c)
	if err != nil {
		return nil, err
	}
	out := metricsSnapshot{}
	for k, u := range all {
		if strings.HasPrefix(k, ns+"/") || strings.HasPrefix(k, "node/") {
			out[k] = u
		}
	}
	return out, nil
}

// podsSettledSince is settledSince for the pods only: nodes sum every pod
// on them, including those of other tests that may still be going away.
func (s metricsSnapshot) podsSettledSince(t time.Time) error {
	pods := metricsSnapshot{}
	for k, u := range s {
		if !strings.HasPrefix(k, "node/") {
			pods[k] = u
		}
	}
	return pods.settledSince(t)
}

// compareReplicaSnapshots checks that a and b hold the same pods and nodes,
// and the same pod values (memory exactly, CPU within cpuTolerance).
func compareReplicaSnapshots(a, b metricsSnapshot) (string, error) {
	var diffs, lines []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	for _, k := range sorted {
		x, okA := a[k]
		y, okB := b[k]
		if !okA || !okB {
			diffs = append(diffs, fmt.Sprintf("%s: served by one replica only", k))
			continue
		}
		d := math.Abs(float64(x.cpuNano - y.cpuNano))
		lines = append(lines, fmt.Sprintf("  %-32s cpu %11dn vs %11dn (diff %.0fn)  memory %d vs %d", k, x.cpuNano, y.cpuNano, d, x.memory, y.memory))
		if strings.HasPrefix(k, "node/") {
			continue
		}
		if d > cpuTolerance || x.memory != y.memory {
			diffs = append(diffs, fmt.Sprintf("%s: cpu %dn vs %dn, memory %d vs %d", k, x.cpuNano, y.cpuNano, x.memory, y.memory))
		}
	}
	if len(diffs) > 0 {
		return strings.Join(lines, "\n"), fmt.Errorf("%s", strings.Join(diffs, "; "))
	}
	return strings.Join(lines, "\n"), nil
}

// stopMargin is how long after a stopped replica was reaped a request may
// still meet it: the aggregator learns that its connection was reset when
// its reading goroutine runs, which on a loaded machine can take a moment.
const stopMargin = time.Second

// metricsRequests sums the metrics.k8s.io requests a replica has counted (0
// before the first).
func metricsRequests(ctx context.Context, c *env.PinnedClient) (float64, error) {
	body, err := selfMetrics(ctx, endpoint{name: "replica", base: c.Base, client: c.Client})
	if err != nil {
		return 0, err
	}
	n, _, err := promValue(body, "apiserver_request_total", `group="metrics.k8s.io"`)
	return n, err
}

// stopDuringLoad lists through the aggregator from haClients clients for
// haLoadDuration and, a third of the way in, sends sig to the replica that
// served most of those requests, and returns it once it has exited. Only
// requests that meet the replica while it goes away may fail: those in
// flight on it, and connections the aggregator opens to its listener before
// the kernel has closed it. Any request sent more than stopMargin after the
// process was reaped must succeed.
func stopDuringLoad(ctx context.Context, t *testing.T, procs []*cluster.Process, pinned map[*cluster.Process]*env.PinnedClient, shapes []shape, sig syscall.Signal) *cluster.Process {
	t.Helper()
	counts := func() map[*cluster.Process]float64 {
		out := map[*cluster.Process]float64{}
		for _, p := range procs {
			n, err := metricsRequests(ctx, pinned[p])
			if err != nil {
				t.Fatalf("%s: %v", p.Name(), err)
			}
			out[p] = n
		}
		return out
	}
	before := counts()
	agg := aggregatorEndpoint(t)
	var (
		wg      sync.WaitGroup
		results []result
	)
	began := time.Now()
	wg.Go(func() {
		results = runLoad(ctx, []endpoint{agg}, shapes, haClients, haLoadDuration)
	})
	time.Sleep(haLoadDuration / 3)
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
	if err := syscall.Kill(victim.Pid(), sig); err != nil {
		t.Fatal(err)
	}
	var reaped time.Time
	select {
	case <-victim.Done():
		reaped = time.Now()
	case <-time.After(exitBound()):
		t.Fatalf("%s still running %v after %v", victim.Name(), exitBound(), sig)
	}
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
		// 429 with Retry-After, which clients retry.
		if sig == syscall.SIGTERM && r.code != http.StatusTooManyRequests {
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
		t.Errorf("%d requests failed while %s drained, other than 429:\n%s", len(refused), victim.Name(), strings.Join(refused, "\n"))
	}
	if len(late) > 0 {
		t.Errorf("%d requests sent more than %v after %s was reaped failed:\n%s", len(late), stopMargin, victim.Name(), strings.Join(late, "\n"))
	}
	if afterKill == 0 {
		t.Errorf("no request succeeded after %s was stopped", victim.Name())
	}
	return victim
}
