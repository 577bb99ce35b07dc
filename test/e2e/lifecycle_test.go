//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"

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

// TestLifecycle stops a server with SIGTERM while clients list, restarts it,
// and restarts it again while every kubelet is too slow to answer. In-flight
// requests complete and the process exits with status 0 within exitBound;
// a restarted server is ready within readyBound, is not ready while it has
// nothing to serve, and serves the pods as soon as it is ready; an HPA
// reading through the aggregator sees no gap longer than the restart.
func TestLifecycle(t *testing.T) {
	ctx := begin(t, 6*time.Minute)
	const ns = "e2e-lifecycle"
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	spec := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 3, CPURequest: "100m"}
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: spec.Selector()}, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 32 << 20})
	if err := env.CreateDeployment(ctx, client, spec); err != nil {
		t.Fatal(err)
	}
	pods, err := env.WaitForRunningPods(ctx, client, ns, spec.Selector(), int(spec.Replicas))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range pods {
		want = append(want, ns+"/"+p.Name)
	}
	// A restarted server gets a first value from one sample only for
	// containers that started at most two resolutions before it; let these
	// pods be older, as after any real restart, so that it needs two.
	for _, p := range pods {
		if p.Status.StartTime == nil {
			t.Fatalf("pod %s is Running without a start time", p.Name)
		}
		if wait := time.Until(p.Status.StartTime.Add(2*suite.resolution + time.Second)); wait > 0 {
			time.Sleep(wait)
		}
	}
	s := deployOwnServer(ctx, t, "group-metrics-server-lifecycle", nil)
	// minReplicas = maxReplicas: the HPA reads the metrics every sync but
	// never scales, so the pods stay those of want.
	if err := env.CreateCPUHPA(ctx, client, ns, spec.Name, spec.Replicas, spec.Replicas, 50); err != nil {
		t.Fatal(err)
	}
	agg := aggregatorEndpoint(t)
	selected := listSelected(ns, spec.Selector().String())
	err = poll(ctx, "the HPA to read 50% utilization", func(ctx context.Context) error {
		if err := servesAll(fetch(ctx, agg, selected), want); err != nil {
			return err
		}
		hpa, err := client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, spec.Name, metav1.GetOptions{})
		if err == nil && utilization(hpa) != 50 {
			err = fmt.Errorf("utilization %d, conditions %v", utilization(hpa), hpa.Status.Conditions)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	stopGaps := watchGaps(ctx, agg, selected, want, ns, spec.Name)
	shapes := []shape{listAllPods(), selected, getPod(ns, pods[0].Name)}
	var down time.Duration
	for attempt := 1; ; attempt++ {
		d, inFlight := stopUnderLoad(ctx, t, s, []endpoint{directEndpoint(t, s), agg}, shapes)
		down = max(down, d)
		if inFlight > 0 {
			break
		}
		// Whether a client's request reaches the server before the signal
		// is up to the scheduler; on a busy machine it may not.
		if attempt == drainAttempts {
			t.Errorf("in %d attempts no request was in flight at SIGTERM: the drain was not exercised", attempt)
			break
		}
		t.Logf("no request was in flight at SIGTERM (attempt %d of %d); starting the server to try again", attempt, drainAttempts)
		startServing(ctx, t, s, fmt.Sprintf("attempt-%d", attempt), ns, want)
	}
	restart(ctx, t, s, "restarted", ns, want)
	err = poll(ctx, "the HPA to read its metrics again", func(ctx context.Context) error {
		hpa, err := client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, spec.Name, metav1.GetOptions{})
		if err == nil && !scalingActive(hpa) {
			err = fmt.Errorf("conditions %v", hpa.Status.Conditions)
		}
		return err
	})
	gaps := stopGaps()
	if err != nil {
		t.Fatal(err)
	}
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

	stopQuietly(ctx, t, s)
	restartWithSlowKubelets(ctx, t, s)
}

// scalingActive reports whether the HPA's ScalingActive condition is True:
// it could read its metrics at its last sync.
func scalingActive(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
	for _, c := range hpa.Status.Conditions {
		if c.Type == autoscalingv2.ScalingActive {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stopUnderLoad sends SIGTERM to the server while clients send requests
// back to back on every endpoint, and checks that it exits with status 0
// within exitBound and that no request sent on its own port before the
// signal failed, but for connections refused once it stopped listening. It
// returns the time from the signal to the exit.
func stopUnderLoad(ctx context.Context, t *testing.T, s *env.Server, eps []endpoint, shapes []shape) (time.Duration, int) {
	t.Helper()
	const clients = 8
	proc := s.Process
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var (
		wg      sync.WaitGroup
		results []result
	)
	wg.Go(func() { results = runLoad(loadCtx, eps, shapes, clients, exitBound()+time.Minute) })
	// Let the clients get going: a second's worth of requests.
	time.Sleep(time.Second)
	sigAt := time.Now()
	if err := syscall.Kill(proc.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exited time.Duration
	select {
	case <-proc.Done():
		exited = time.Since(sigAt)
	case <-time.After(exitBound()):
		stopLoad()
		wg.Wait()
		t.Fatalf("%s still running %v after SIGTERM", proc.Name(), exitBound())
	}
	stopLoad()
	wg.Wait()
	if err := proc.Err(); err != nil {
		t.Errorf("%s exited after SIGTERM: %v, want status 0", proc.Name(), err)
	}

	var inFlight, refused, before int
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
		case errors.Is(r.err, syscall.ECONNREFUSED):
			// Sent after the listener closed: never accepted.
			refused++
		default:
			t.Errorf("a request sent %v before SIGTERM failed: %v", sigAt.Sub(r.start).Round(time.Microsecond), r)
		}
	}
	t.Logf("SIGTERM under load (%d clients on each of %v): exited %v later with %v; of %d requests sent on its port before the signal, %d were in flight and completed after it, %d were refused; requests sent after the signal, by outcome: %v",
		clients, endpointNames(eps), exited.Round(time.Millisecond), exitStatus(proc.Err()), before, inFlight, refused, after)
	return exited, inFlight
}

// drainAttempts is how often stopUnderLoad is tried until a request is in
// flight at the signal.
const drainAttempts = 3

// startServing starts the server's command line again and waits until it
// serves every pod of want.
func startServing(ctx context.Context, t *testing.T, s *env.Server, suffix, ns string, want []string) {
	t.Helper()
	proc, err := s.StartAgain(suite.binDir, s.Process.Name()+"-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	s.Process = proc
	direct := directEndpoint(t, s)
	nsList := shape{"list-namespace", metricsV1beta1 + "/namespaces/" + ns + "/pods"}
	ctx, cancel := context.WithTimeout(ctx, readyBound()+time.Minute)
	defer cancel()
	err = env.Poll(ctx, proc.Name()+" to serve every pod", append(watched(), proc), func(ctx context.Context) error {
		return servesAll(fetch(ctx, direct, nsList), want)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func endpointNames(eps []endpoint) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.name)
	}
	return out
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

// stopQuietly stops the server with SIGTERM and checks its exit status.
func stopQuietly(ctx context.Context, t *testing.T, s *env.Server) {
	t.Helper()
	if err := syscall.Kill(s.Process.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Process.Done():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(exitBound()):
		t.Fatalf("%s still running %v after SIGTERM", s.Process.Name(), exitBound())
	}
	if err := s.Process.Err(); err != nil {
		t.Errorf("%s exited after SIGTERM: %v, want status 0", s.Process.Name(), err)
	}
}

// readyzPoll is what polling a server's /readyz saw.
type readyzPoll struct {
	firstAnswer, ready time.Duration // since the start; ready 0 if never
	notReady           int           // answers other than 200 before ready
	lastBody           string        // of the last answer other than 200
}

// pollReadyz asks /readyz every 100 ms from started until it answers 200 or
// d has passed since started.
func pollReadyz(ctx context.Context, ep endpoint, started time.Time, d time.Duration) readyzPoll {
	var rp readyzPoll
	ctx, cancel := context.WithDeadline(ctx, started.Add(d))
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		code, body, err := env.Get(ctx, ep.client, ep.base+"/readyz?verbose")
		if err == nil {
			if rp.firstAnswer == 0 {
				rp.firstAnswer = time.Since(started)
			}
			if code == http.StatusOK {
				rp.ready = time.Since(started)
				return rp
			}
			rp.notReady++
			rp.lastBody = body
		}
		select {
		case <-ctx.Done():
			return rp
		case <-ticker.C:
		}
	}
}

// failingChecks returns the failing lines of a verbose /readyz body.
func failingChecks(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "[-]") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

// restart starts the server's command line again and checks that it is
// ready within readyBound and, once ready, serves every pod of want.
func restart(ctx context.Context, t *testing.T, s *env.Server, suffix, ns string, want []string) {
	t.Helper()
	proc, err := s.StartAgain(suite.binDir, s.Process.Name()+"-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	s.Process = proc
	direct := directEndpoint(t, s)
	nsList := shape{"list-namespace", metricsV1beta1 + "/namespaces/" + ns + "/pods"}
	rp := pollReadyz(ctx, direct, started, readyBound()+time.Minute)
	if rp.ready == 0 {
		t.Fatalf("restarted server not ready %v after it started (last /readyz: %s)", readyBound()+time.Minute, failingChecks(rp.lastBody))
	}
	atReady := fetch(ctx, direct, nsList)
	// Then every 100 ms: when does a list first succeed, does it hold every
	// pod, and when does one first hold every pod?
	var (
		firstOK, complete time.Duration
		firstOKMissing    error
	)
	if !atReady.failed() {
		firstOK, firstOKMissing = atReady.end.Sub(started), servesAll(atReady, want)
	}
	err = env.PollUntil(ctx, "the restarted server to serve every pod", 100*time.Millisecond, append(watched(), proc), func(ctx context.Context) error {
		r := fetch(ctx, direct, nsList)
		err := servesAll(r, want)
		if !r.failed() && firstOK == 0 {
			firstOK, firstOKMissing = r.end.Sub(started), err
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	complete = time.Since(started)
	t.Logf("restarted: /readyz answered %v after the start, %d times not ready (%s), ready %v after the start (bound %v); first list that succeeded %v after the start (missing pods: %v), first that held every pod %v after",
		rp.firstAnswer.Round(time.Millisecond), rp.notReady, failingChecks(rp.lastBody), rp.ready.Round(time.Millisecond), readyBound(),
		firstOK.Round(time.Millisecond), firstOKMissing, complete.Round(time.Millisecond))
	if rp.ready > readyBound() {
		t.Errorf("restarted server ready %v after it started, more than %v", rp.ready, readyBound())
	}
	if atReady.failed() {
		t.Errorf("restarted server ready, but a list by the cluster admin right after failed: %v (first list that succeeded %v after the start, ready %v after)",
			atReady, firstOK.Round(time.Millisecond), rp.ready.Round(time.Millisecond))
	}
	if firstOKMissing != nil {
		t.Errorf("restarted server ready with nothing to serve for the pods that ran before it started: the first list that succeeded (%v after the start, ready %v after) missed %v; every pod was served %v after the start",
			firstOK.Round(time.Millisecond), rp.ready.Round(time.Millisecond), firstOKMissing, complete.Round(time.Millisecond))
	}
}

// restartWithSlowKubelets starts the stopped server again while every
// kubelet answers later than the request timeout: it must stay not ready
// through two scrapes, and become ready within readyBound once they answer.
func restartWithSlowKubelets(ctx context.Context, t *testing.T, s *env.Server) {
	t.Helper()
	nodes := suite.fleet.Nodes()
	for _, n := range nodes {
		if err := n.SetFault(fakekubelet.Slow(suite.timeout + suite.resolution)); err != nil {
			t.Fatal(err)
		}
	}
	clear := func() {
		for _, n := range nodes {
			_ = n.ClearFault(fakekubelet.FaultSlow)
		}
	}
	t.Cleanup(clear)
	proc, err := s.StartAgain(suite.binDir, s.Process.Name()+"-slow")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	s.Process = proc
	direct := directEndpoint(t, s)
	// Two scrapes fail within a resolution and two timeouts of the first.
	hold := suite.resolution + 2*suite.timeout
	rp := pollReadyz(ctx, direct, started, readyBound()+hold)
	if rp.firstAnswer == 0 {
		t.Fatalf("/readyz did not answer within %v of the start", readyBound()+hold)
	}
	if rp.ready != 0 {
		t.Errorf("ready %v after the start although no kubelet has answered (%d answers not ready before)", rp.ready, rp.notReady)
	}
	code, body, err := env.Get(ctx, direct.client, direct.base+"/livez")
	if err != nil || code != http.StatusOK {
		t.Errorf("/livez while every kubelet is slow: %d %v %s", code, err, body)
	}
	t.Logf("with every kubelet slower than the timeout: /readyz answered %v after the start, not ready in all %d answers over %v: %s",
		rp.firstAnswer.Round(time.Millisecond), rp.notReady, (readyBound() + hold).Round(time.Millisecond), failingChecks(rp.lastBody))
	clear()
	cleared := time.Now()
	rp = pollReadyz(ctx, direct, cleared, readyBound()+time.Minute)
	t.Logf("kubelets answering again: ready %v later (bound %v)", rp.ready.Round(time.Millisecond), readyBound())
	if rp.ready == 0 || rp.ready > readyBound() {
		t.Errorf("ready %v after the kubelets answered again, want within %v (0: never)", rp.ready, readyBound())
	}
}

// gapWatch is what watchGaps saw.
type gapWatch struct {
	lists, bad int
	// listGap is the longest time between two lists that served every
	// pod; hpaGap the longest time the HPA's ScalingActive was not True.
	listGap, hpaGap time.Duration
}

// watchGaps lists sh through ep and reads the HPA every 250 ms until the
// returned function is called.
func watchGaps(ctx context.Context, ep endpoint, sh shape, want []string, ns, hpa string) func() gapWatch {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg                  sync.WaitGroup
		w                   gapWatch
		lastGood, hpaFailed time.Time
	)
	client := suite.cluster.Client()
	wg.Go(func() {
		ticker := time.NewTicker(250 * time.Millisecond)
		defer ticker.Stop()
		for ctx.Err() == nil {
			r := fetch(ctx, ep, sh)
			if ctx.Err() != nil {
				break
			}
			w.lists++
			if servesAll(r, want) == nil {
				if !lastGood.IsZero() {
					w.listGap = max(w.listGap, r.end.Sub(lastGood))
				}
				lastGood = r.end
			} else {
				w.bad++
			}
			h, err := client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, hpa, metav1.GetOptions{})
			now := time.Now()
			if err == nil {
				active := scalingActive(h)
				switch {
				case !active && hpaFailed.IsZero():
					hpaFailed = now
				case active && !hpaFailed.IsZero():
					w.hpaGap = max(w.hpaGap, now.Sub(hpaFailed))
					hpaFailed = time.Time{}
				}
			}
			select {
			case <-ctx.Done():
			case <-ticker.C:
			}
		}
		now := time.Now()
		if !lastGood.IsZero() {
			w.listGap = max(w.listGap, now.Sub(lastGood))
		}
		if !hpaFailed.IsZero() {
			w.hpaGap = max(w.hpaGap, now.Sub(hpaFailed))
		}
	})
	return func() gapWatch {
		cancel()
		wg.Wait()
		return w
	}
}
