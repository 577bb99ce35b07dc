//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// exitBound is how long the server may take to exit after SIGTERM. It sets
// no shutdown options of its own, so k8s.io/apiserver's defaults apply: it
// stops accepting after ShutdownDelayDuration and gives in-flight requests
// up to RequestTimeout (its ShutdownTimeout) to finish. A scrape in flight
// ends within the request timeout, and ten seconds more cover the rest of
// the process's exit on a loaded machine.
func exitBound() time.Duration {
	cfg := genericapiserver.NewConfig(serializer.NewCodecFactory(runtime.NewScheme()))
	return cfg.ShutdownDelayDuration + cfg.RequestTimeout + suite.timeout + 10*time.Second
}

// readyBound is how soon after it starts a server must be ready: its first
// scrape starts once its caches have synced and ends within the request
// timeout; a resolution of margin covers loading the serving certificate,
// syncing the caches and a loaded machine.
func readyBound() time.Duration { return 2*suite.resolution + suite.timeout }

// drainAttempts is how often stopUnderLoad is tried until a request is in
// flight at the signal.
const drainAttempts = 3

// TestLifecycle stops a server with SIGTERM while clients list, restarts it,
// and restarts it again while every kubelet is too slow to answer.
func TestLifecycle(t *testing.T) {
	ctx := begin(t, 6*time.Minute)
	const ns = "e2e-lifecycle"
	newNamespace(ctx, t, ns)
	spec, pods, want := agedWorkload(ctx, t, ns)
	s := deployOwnServer(ctx, t, "group-metrics-server-lifecycle", nil)
	// minReplicas = maxReplicas: the HPA reads the metrics every sync but
	// never scales, so the pods stay those of want.
	must(t, env.CreateCPUHPA(ctx, suite.cluster.Client(), ns, spec.Name, spec.Replicas, spec.Replicas, 50))
	agg := aggregatorEndpoint(t, suite.cluster)
	selected := listSelected(ns, spec.Selector().String())
	must(t, waitHPA(ctx, ns, spec.Name, "read 50% utilization", func(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
		return utilization(hpa) == 50
	}))
	shapes := []shape{listAllPods(), selected, getPod(ns, pods[0].Name)}

	// Tried until a request was in flight at the signal: whether a client's
	// request reaches the server before it is up to the scheduler. The gap
	// watch of every failed attempt is dropped once the server serves
	// again, so that only one restart counts.
	var down time.Duration
	var stopGaps func() gapWatch
	for attempt := 1; ; attempt++ {
		stopGaps = watchGaps(ctx, agg, selected, want, ns, spec.Name)
		var inFlight int
		down, inFlight = stopUnderLoad(ctx, t, s, []endpoint{directEndpoint(t, s), agg}, shapes)
		if inFlight > 0 {
			break
		}
		if attempt == drainAttempts {
			t.Errorf("in %d attempts no request was in flight at SIGTERM: the drain was not exercised", attempt)
			break
		}
		t.Logf("no request was in flight at SIGTERM (attempt %d of %d); starting the server to try again", attempt, drainAttempts)
		direct := startAgain(t, s, fmt.Sprintf("attempt-%d", attempt))
		must(t, boundedPoll(ctx, readyBound()+time.Minute, s.Process.Name()+" to serve every pod", append(watched(), s.Process),
			func(ctx context.Context) error { return servesAll(fetch(ctx, direct, listNamespace(ns)), want) }))
		err := waitHPA(ctx, ns, spec.Name, "read its metrics again", scalingActive)
		stopGaps()
		must(t, err)
	}
	restart(ctx, t, s, "restarted", ns, want, pods[0].Spec.NodeName)
	err := waitHPA(ctx, ns, spec.Name, "read its metrics again", scalingActive)
	gaps := stopGaps()
	must(t, err)
	bound := down + readyBound()
	t.Logf("across the restart, through the aggregator: longest time without a complete list %v (%d lists, %d incomplete or failed); the HPA's ScalingActive was not True for at most %v (bound %v: stopped for %v, then readyBound)",
		gaps.listGap.Round(time.Millisecond), gaps.lists, gaps.bad, gaps.hpaGap.Round(time.Millisecond), bound, down.Round(time.Millisecond))
	if gaps.listGap > bound {
		t.Errorf("no complete list through the aggregator for %v, more than %v", gaps.listGap, bound)
	}
	// The HPA notices a change at its next sync.
	if hpaBound := bound + 2*suite.opts.HPASyncPeriod; gaps.hpaGap > hpaBound {
		t.Errorf("the HPA could not read its metrics for %v, more than %v", gaps.hpaGap, hpaBound)
	}

	sigterm(ctx, t, s.Process)
	restartWithSlowKubelets(ctx, t, s)
}

// agedWorkload creates a Deployment of three pods (100m requested, told 50m)
// in ns and returns once they have run for longer than two resolutions: a
// restarted server gets a first value from one sample only for containers
// that started at most that long before, so, as after any real restart, it
// needs two.
func agedWorkload(ctx context.Context, t *testing.T, ns string) (env.DeploymentSpec, []corev1.Pod, []string) {
	t.Helper()
	spec := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 3, CPURequest: "100m"}
	pods, want := runDeployment(ctx, t, spec, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 32 << 20})
	var aged time.Time
	for _, p := range pods {
		if p.Status.StartTime == nil {
			t.Fatalf("pod %s is Running without a start time", p.Name)
		}
		if at := p.Status.StartTime.Add(2*suite.resolution + time.Second); at.After(aged) {
			aged = at
		}
	}
	// What is awaited is an age, a point on the clock, not an event: the
	// pods started moments ago, so the wait is bounded by two resolutions
	// and a second, and the test's context ends it sooner if it must.
	if !sleepUntil(ctx, aged) {
		t.Fatalf("the pods did not reach the age of two resolutions: %v", ctx.Err())
	}
	return spec, pods, want
}

// sleepUntil waits until at or ctx ends, and reports whether at came.
func sleepUntil(ctx context.Context, at time.Time) bool {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stopUnderLoad sends SIGTERM to the server while clients send requests
// back to back on every endpoint, and checks that it exits with status 0
// within exitBound and that no request sent on its own port before the
// signal failed, but for connections refused once it stopped listening and
// answers with Retry-After to requests that arrived after it began to
// drain. It returns the time from the signal to the exit and how many
// requests were in flight at the signal.
func stopUnderLoad(ctx context.Context, t *testing.T, s *env.Server, eps []endpoint, shapes []shape) (time.Duration, int) {
	t.Helper()
	const clients = 8
	var (
		wg       sync.WaitGroup
		results  []result
		answered atomic.Int64
	)
	defer wg.Wait()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wg.Go(func() { results = runLoadCounting(loadCtx, eps, shapes, clients, exitBound()+time.Minute, &answered) })
	// Let the clients get going: every client has had answers.
	must(t, waitAnswered(ctx, &answered, int64(4*clients*len(eps)), 30*time.Second))
	proc := s.Process
	sigAt, exited := sigterm(ctx, t, proc)
	stopLoad()
	wg.Wait()
	var inFlight, refused, retry, before int
	after := map[string]int{}
	for _, r := range results {
		if !r.start.Before(sigAt) {
			after[outcome(r)]++
			continue
		}
		if r.endpoint != "direct" {
			continue
		}
		before++
		switch {
		case !r.failed() && r.end.After(sigAt):
			inFlight++
		case !r.failed():
		case errors.Is(r.err, syscall.ECONNREFUSED): // sent after the listener closed: never accepted
			refused++
		case r.retryAfter != "":
			// Arrived after the drain began: k8s.io/apiserver answers
			// 503 "shutting down" with Retry-After, which clients retry.
			retry++
		default:
			t.Errorf("a request sent %v before SIGTERM failed: %v", sigAt.Sub(r.start).Round(time.Microsecond), r)
		}
	}
	t.Logf("SIGTERM under load (%d clients on each of %d endpoints): exited %v later with %v; of %d requests sent on its port before the signal, %d were in flight and completed after it, %d were refused, %d told to retry; requests sent after the signal, by outcome: %v",
		clients, len(eps), exited.Round(time.Millisecond), exitStatus(proc.Err()), before, inFlight, refused, retry, after)
	return exited, inFlight
}

// startAgain starts the server's command line again, as a process named
// with suffix, and returns its own port's endpoint.
func startAgain(t *testing.T, s *env.Server, suffix string) endpoint {
	t.Helper()
	proc, err := s.StartAgain(s.Process.Name() + "-" + suffix)
	must(t, err)
	s.Process = proc
	return directEndpoint(t, s)
}

func exitStatus(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// outcome names a request's result for counting.
func outcome(r result) string {
	switch {
	case r.err == nil:
		return fmt.Sprintf("%s %d", r.endpoint, r.code)
	case errors.Is(r.err, syscall.ECONNREFUSED):
		return r.endpoint + " refused"
	case errors.Is(r.err, syscall.ECONNRESET):
		return r.endpoint + " reset"
	}
	return r.endpoint + " error"
}

// sigterm sends SIGTERM to proc, waits at most exitBound for it to exit and
// checks that it exited with status 0. It returns when the signal was sent
// and how long the exit took.
func sigterm(ctx context.Context, t *testing.T, proc *cluster.Process) (time.Time, time.Duration) {
	t.Helper()
	sigAt := time.Now()
	must(t, syscall.Kill(proc.Pid(), syscall.SIGTERM))
	select {
	case <-proc.Done():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(exitBound()):
		t.Fatalf("%s still running %v after SIGTERM", proc.Name(), exitBound())
	}
	if err := proc.Err(); err != nil {
		t.Errorf("%s exited after SIGTERM: %v, want status 0", proc.Name(), err)
	}
	return sigAt, time.Since(sigAt)
}
