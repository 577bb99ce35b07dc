//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

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
	every(ctx, 100*time.Millisecond, func() {
		code, body, err := env.Get(ctx, ep.client, ep.base+"/readyz?verbose")
		switch {
		case err != nil:
			return
		case rp.firstAnswer == 0:
			rp.firstAnswer = time.Since(started)
		}
		if code == http.StatusOK {
			rp.ready = time.Since(started)
			cancel()
			return
		}
		rp.notReady++
		rp.lastBody = body
	})
	return rp
}

// failingChecks returns the failing lines of a verbose /readyz body.
func failingChecks(body string) string {
	lines := slices.DeleteFunc(strings.Split(body, "\n"), func(l string) bool { return !strings.HasPrefix(l, "[-]") })
	return strings.Join(lines, "; ")
}

// restart starts the server's command line again while clients list ns
// on its port, with the node of slowNode's pods answering late (within the
// timeout, so that its scrape ends each tick last), and checks that it is
// ready within readyBound and that no list it answers once ready holds fewer
// pods than the replica that kept running (the suite's server) holds: want.
func restart(ctx context.Context, t *testing.T, s *env.Server, suffix, ns string, want []string, slowNode string) {
	t.Helper()
	nsList := listNamespace(ns)
	running := directEndpoint(t, suite.server)
	must(t, poll(ctx, "the running replica to serve every pod", func(ctx context.Context) error {
		return servesAll(fetch(ctx, running, nsList), want)
	}))
	slow, ok := suite.fleet.Node(slowNode)
	if !ok {
		t.Fatalf("no fake node %s", slowNode)
	}
	must(t, slow.SetFault(fakecore.Slow(suite.timeout/2)))
	defer func() { must(t, slow.ClearFault(fakecore.FaultSlow)) }()

	direct := startAgain(t, s, suffix)
	started := time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	loaded := make(chan []result, 1)
	go func() { loaded <- runLoad(loadCtx, []endpoint{direct}, []shape{nsList}, 4, readyBound()+2*time.Minute) }()
	rp := pollReadyz(ctx, direct, started, readyBound()+time.Minute)
	if rp.ready == 0 {
		stopLoad()
		<-loaded
		t.Fatalf("restarted server not ready %v after it started (last /readyz: %s)", readyBound()+time.Minute, failingChecks(rp.lastBody))
	}
	// A list right away, then every 100 ms: when does a list first succeed,
	// does it hold every pod, and when does one first hold every pod?
	var firstOK time.Duration
	var firstOKMissing error
	record := func(r result) error {
		err := servesAll(r, want)
		if !r.failed() && firstOK == 0 {
			firstOK, firstOKMissing = r.end.Sub(started), err
		}
		return err
	}
	atReady := fetch(ctx, direct, nsList)
	_ = record(atReady)
	must(t, cluster.PollUntil(ctx, "the restarted server to serve every pod", 100*time.Millisecond, 10*time.Second, append(watched(), s.Process), func(ctx context.Context) error {
		return record(fetch(ctx, direct, nsList))
	}))
	complete := time.Since(started)
	// The load goes on for a resolution after ready, over the ticks that
	// follow the first: a measurement window, ended by the test's context
	// if it must.
	sleepUntil(ctx, started.Add(rp.ready+suite.resolution))
	stopLoad()
	// Every list of the load sent once /readyz said ready, in the
	// resolution after, must hold every pod: the aggregator routes to a
	// replica from then on.
	readyAt := started.Add(rp.ready)
	var sent, answered int
	var short []string
	for _, r := range <-loaded {
		if r.start.Before(readyAt) {
			continue
		}
		sent++
		if r.failed() {
			continue
		}
		answered++
		if err := servesAll(r, want); err != nil && len(short) < 3 {
			short = append(short, fmt.Sprintf("%v after the start: %v", r.start.Sub(started).Round(time.Millisecond), err))
		}
	}
	t.Logf("restarted with node %s slow (%v): /readyz answered %v after the start, %d times not ready (%s), ready %v after the start (bound %v); first list that succeeded %v after the start (missing pods: %v), first that held every pod %v after; %d lists under load sent once ready, %d answered",
		slowNode, suite.timeout/2, rp.firstAnswer.Round(time.Millisecond), rp.notReady, failingChecks(rp.lastBody), rp.ready.Round(time.Millisecond), readyBound(),
		firstOK.Round(time.Millisecond), firstOKMissing, complete.Round(time.Millisecond), sent, answered)
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
	if answered == 0 {
		t.Errorf("none of the %d lists sent under load once ready was answered", sent)
	}
	if len(short) > 0 {
		t.Errorf("once ready, the restarted server answered lists with fewer pods than the running replica holds: %s", strings.Join(short, "; "))
	}
}

// restartWithSlowKubelets starts the stopped server again while every
// kubelet answers later than the request timeout: it must stay not ready
// through two scrapes, and become ready within readyBound once they answer.
func restartWithSlowKubelets(ctx context.Context, t *testing.T, s *env.Server) {
	t.Helper()
	nodes := suite.fleet.Nodes()
	for _, n := range nodes {
		must(t, n.SetFault(fakecore.Slow(suite.timeout+suite.resolution)))
	}
	clear := func() {
		for _, n := range nodes {
			_ = n.ClearFault(fakecore.FaultSlow)
		}
	}
	t.Cleanup(clear)
	direct := startAgain(t, s, "slow")
	started := time.Now()
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
	// /readyz withholds the reason; the server's log gives it, once for
	// each reason, and the pass once (docs/operations.md).
	failed, err := linesWith(s.Process.LogPath(), `"Failed probe"`, `probe="metric-storage-ready"`)
	must(t, err)
	t.Logf("%s logged %d failed probes:\n%s", s.Process.Name(), len(failed), strings.Join(failed, "\n"))
	if len(failed) == 0 || len(failed) >= rp.notReady {
		t.Errorf("%d \"Failed probe\" lines for %d answers not ready, want at least one and fewer than the answers", len(failed), rp.notReady)
	}
	clear()
	cleared := time.Now()
	rp = pollReadyz(ctx, direct, cleared, readyBound()+time.Minute)
	t.Logf("kubelets answering again: ready %v later (bound %v)", rp.ready.Round(time.Millisecond), readyBound())
	if rp.ready == 0 || rp.ready > readyBound() {
		t.Errorf("ready %v after the kubelets answered again, want within %v (0: never)", rp.ready, readyBound())
	}
	if err := logged(s.Process, `"Probe passing"`, `probe="metric-storage-ready"`); err != nil {
		t.Error(err)
	}
}

// gapWatch is what watchGaps saw: listGap is the longest time between two
// lists that served every pod; hpaGap the longest time the HPA's
// ScalingActive was not True.
type gapWatch struct {
	lists, bad      int
	listGap, hpaGap time.Duration
}

// watchGaps lists sh through ep and reads the HPA every 250 ms until the
// returned function is called.
func watchGaps(ctx context.Context, ep endpoint, sh shape, want []string, ns, hpa string) func() gapWatch {
	var w gapWatch
	var lastGood, hpaFailed time.Time
	stop := background(ctx, 250*time.Millisecond, func(ctx context.Context) {
		r := fetch(ctx, ep, sh)
		if ctx.Err() != nil {
			return
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
		h, err := getHPA(ctx, ns, hpa)
		now := time.Now()
		if err != nil {
			return
		}
		switch active := scalingActive(h); {
		case !active && hpaFailed.IsZero():
			hpaFailed = now
		case active && !hpaFailed.IsZero():
			w.hpaGap = max(w.hpaGap, now.Sub(hpaFailed))
			hpaFailed = time.Time{}
		}
	})
	return func() gapWatch {
		stop()
		now := time.Now()
		if !lastGood.IsZero() {
			w.listGap = max(w.listGap, now.Sub(lastGood))
		}
		if !hpaFailed.IsZero() {
			w.hpaGap = max(w.hpaGap, now.Sub(hpaFailed))
		}
		return w
	}
}
