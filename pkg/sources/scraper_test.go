package sources

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// fakeTarget answers batch and err. block, when not nil, holds Scrape
// until it is closed or ctx ends; a stuck target ignores ctx, as a target
// still chewing on a hostile answer would. started and scraped, when not
// nil, hear of each scrape as it begins and once it ends.
type fakeTarget struct {
	id               string
	batch            *Batch
	err              error
	block            chan struct{}
	stuck            bool
	n                atomic.Int32
	started, scraped chan string
}

func (f *fakeTarget) ID() string      { return f.id }
func (f *fakeTarget) Nodes() []string { return []string{f.id} }
func (f *fakeTarget) Scrape(ctx context.Context) (*Batch, error) {
	f.n.Add(1)
	if f.started != nil {
		f.started <- f.id
	}
	if f.scraped != nil {
		defer func() { f.scraped <- f.id }()
	}
	switch {
	case f.block == nil:
	case f.stuck:
		<-f.block
	default:
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.batch, f.err
}

type fakeSource struct {
	name    string
	targets []Target
}

func (f *fakeSource) Name() string               { return f.name }
func (f *fakeSource) Targets() ([]Target, error) { return f.targets, nil }

// kubeletScraper is a scraper of one source, kubelet, of targets.
func kubeletScraper(cfg ScraperConfig, targets ...Target) *Scraper {
	cfg.Sources = []Source{&fakeSource{name: "kubelet", targets: targets}}
	return NewScraper(cfg)
}

type recordingSink struct {
	mu     sync.Mutex
	stored map[string]bool
	failed map[string]string
	pruned map[string]struct{}
	// storedCh receives each stored node, if not nil.
	storedCh chan string
}

func newRecordingSink() *recordingSink {
	return &recordingSink{stored: map[string]bool{}, failed: map[string]string{}, storedCh: make(chan string, 16)}
}

func (r *recordingSink) Store(_ string, nodes []string, _ *Batch, _ time.Time) {
	r.mu.Lock()
	for _, n := range nodes {
		r.stored[n] = true
	}
	r.mu.Unlock()
	for _, n := range nodes {
		r.storedCh <- n
	}
}

func (r *recordingSink) Failed(_ string, nodes []string, err error, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range nodes {
		r.failed[n] = Reason(err)
	}
}

func (r *recordingSink) Prune(_ string, keep map[string]struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruned = keep
}

func TestTickKeepsPartialResults(t *testing.T) {
	slow := &fakeTarget{id: "slow", batch: &Batch{}, block: make(chan struct{})}
	targets := []Target{
		&fakeTarget{id: "ok", batch: &Batch{}},
		&fakeTarget{id: "refused", err: WithReason(ReasonConnection, errors.New("refused"))},
		&fakeTarget{id: "garbage", err: WithReason(ReasonDecode, errors.New("bad json"))},
		&fakeTarget{id: "partial", batch: &Batch{}, err: WithReason(ReasonDecode, errors.New("one pod left out"))},
		slow,
	}
	RegisterMetrics()
	// Of the targets, partial is counted as a partial scrape, refused and
	// garbage as failures by their reasons.
	counts := func() map[string]float64 {
		t.Helper()
		return map[string]float64{
			"partial": counterValue(t, partialScrapes.WithLabelValues("kubelet")),
			"refused": counterValue(t, scrapeFailures.WithLabelValues("kubelet", ReasonConnection)),
			"garbage": counterValue(t, scrapeFailures.WithLabelValues("kubelet", ReasonDecode)),
		}
	}
	before := counts()
	sink := newRecordingSink()
	s := kubeletScraper(ScraperConfig{Sink: sink, Resolution: time.Minute, Timeout: 30 * time.Second, Concurrency: 4}, targets...)

	done := make(chan struct{})
	go func() {
		s.Tick(context.Background())
		close(done)
	}()
	// Both good targets are stored while the slow one still hangs.
	got := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for len(got) < 2 {
		select {
		case n := <-sink.storedCh:
			got[n] = true
		case <-deadline:
			t.Fatalf("stored only %v while a slow target was pending", got)
		}
	}
	close(slow.block)
	<-done

	checkDiff(t, "stored", map[string]bool{"ok": true, "partial": true, "slow": true}, sink.stored)
	failed := map[string]string{"refused": ReasonConnection, "garbage": ReasonDecode}
	checkDiff(t, "failed", failed, sink.failed)
	checkDiff(t, "TargetErrors", failed, s.TargetErrors())
	if len(sink.pruned) != len(targets) {
		t.Errorf("prune kept %v, want all %d targets", sink.pruned, len(targets))
	}
	if s.LastTick().IsZero() || s.LastSuccess().IsZero() {
		t.Error("LastTick or LastSuccess not recorded")
	}
	counted := counts()
	for k := range counted {
		counted[k] -= before[k]
	}
	checkDiff(t, "counted", map[string]float64{"partial": 1, "refused": 1, "garbage": 1}, counted)
}

func checkDiff(t *testing.T, what string, want, got any) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func counterValue(t *testing.T, c metrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTickTimesOutSlowTarget(t *testing.T) {
	slow := &fakeTarget{id: "slow", block: make(chan struct{})}
	defer close(slow.block)
	sink := newRecordingSink()
	s := kubeletScraper(ScraperConfig{Sink: sink, Resolution: time.Minute, Timeout: 50 * time.Millisecond, Concurrency: 1}, slow)
	s.Tick(context.Background())
	if got := sink.failed["slow"]; got != ReasonTimeout {
		t.Errorf("slow target failure reason = %q, want %q", got, ReasonTimeout)
	}
}

func TestRecoveredTargetIsHealthy(t *testing.T) {
	tgt := &fakeTarget{id: "n", err: errors.New("down")}
	s := kubeletScraper(ScraperConfig{Sink: newRecordingSink(), Resolution: time.Minute, Timeout: time.Second}, tgt)
	s.Tick(context.Background())
	if len(s.TargetErrors()) != 1 {
		t.Fatalf("TargetErrors = %v, want one", s.TargetErrors())
	}
	tgt.err, tgt.batch = nil, &Batch{}
	s.Tick(context.Background())
	if len(s.TargetErrors()) != 0 {
		t.Fatalf("TargetErrors = %v after recovery, want none", s.TargetErrors())
	}
}

// TestOverrunningTargetDelaysNoOther checks that a target that ignores
// its deadline holds up neither the tick nor the other targets, in this
// tick or the next, even with one worker; it is scraped again only once
// its scrape has ended, and its late result is stored.
func TestOverrunningTargetDelaysNoOther(t *testing.T) {
	stuck := &fakeTarget{id: "stuck", batch: &Batch{}, block: make(chan struct{}), stuck: true}
	sink := newRecordingSink()
	s := kubeletScraper(ScraperConfig{Sink: sink, Resolution: time.Second, Timeout: 50 * time.Millisecond, Concurrency: 1}, stuck, &fakeTarget{id: "ok", batch: &Batch{}})
	for tick := range 2 {
		s.Tick(context.Background()) // returns although stuck has not
		select {
		case n := <-sink.storedCh:
			if n != "ok" {
				t.Fatalf("tick %d stored %q, want ok", tick, n)
			}
		default:
			t.Fatalf("tick %d returned without storing ok", tick)
		}
	}
	if got := stuck.n.Load(); got != 1 {
		t.Errorf("stuck target scraped %d times while busy, want 1", got)
	}
	close(stuck.block)
	if n := recv(t, sink.storedCh, 20*time.Second, "the late result of the stuck target was never stored"); n != "stuck" {
		t.Errorf("stored %q, want the late result of stuck", n)
	}
}
