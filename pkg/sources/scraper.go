package sources

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ScraperConfig configures a Scraper.
type ScraperConfig struct {
	Sources []Source
	Sink    Sink
	// Series receives the named series of the batches; nil drops them.
	Series SeriesSink
	// Secondary marks a scraper beside the server's main one (the pod
	// endpoints'): it leaves the process-wide tick metrics (cycle
	// duration, last tick), which alerts read as the usage's, to the main
	// one. Its targets' metrics, labelled by source, are written as any.
	Secondary bool
	Clock     clock.WithTicker
	// Resolution is the time between two ticks.
	Resolution time.Duration
	// Timeout bounds each target's scrape. It must be below Resolution.
	Timeout time.Duration
	// Concurrency bounds how many targets are scraped at once.
	Concurrency int
	// EarlyDelay, when positive, enables early scrapes: Soon(node) scrapes
	// the targets covering node this long after it is called, outside the
	// ticks. It must leave a new container enough time to yield a rate
	// from its first sample.
	EarlyDelay time.Duration
}

// Scraper collects every target of every source once per resolution and
// stores each target's batch as soon as it arrives, so a slow target delays
// only itself.
type Scraper struct {
	cfg ScraperConfig

	// lastTickEnd and lastSuccess hold Unix nanoseconds (0 = never).
	lastTickEnd atomic.Int64
	lastSuccess atomic.Int64
	// ticks counts the ticks completed.
	ticks atomic.Int64

	mu     sync.Mutex
	health map[string]string // target ID -> last failure reason, "" when healthy
	// partial holds the targets whose last successful scrape left points
	// out.
	partial map[string]bool
	// byNode maps a node to the jobs covering it, as of the last tick.
	byNode map[string][]job
	// lastJobs are the jobs of the last tick.
	lastJobs []job
	// busy holds the IDs of targets being scraped: a target is scraped by
	// one goroutine at a time, so its results are stored in order.
	busy map[string]bool
	// early holds the targets with an early scrape pending, and when it is
	// due.
	early   map[string]earlyScrape
	earlyCh chan struct{} // wakes the early-scrape loop
}

type earlyScrape struct {
	job job
	due time.Time
}

// NewScraper returns a Scraper; call Run to start it.
func NewScraper(cfg ScraperConfig) *Scraper {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	return &Scraper{
		cfg:     cfg,
		health:  map[string]string{},
		partial: map[string]bool{},
		busy:    map[string]bool{},
		early:   map[string]earlyScrape{},
		earlyCh: make(chan struct{}, 1),
	}
}

// Run ticks until ctx is done, starting with one tick right away and a
// second half a resolution later: most usage needs two samples, and until
// it has some the server has nothing to serve (and is not ready).
func (s *Scraper) Run(ctx context.Context) {
	if s.cfg.EarlyDelay > 0 {
		go s.runEarly(ctx)
	}
	s.Tick(ctx)
	second := s.cfg.Clock.NewTimer(s.cfg.Resolution / 2)
	select {
	case <-ctx.Done():
		second.Stop()
		return
	case <-second.C():
	}
	ticker := s.cfg.Clock.NewTicker(s.cfg.Resolution)
	defer ticker.Stop()
	for {
		s.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// LastTick is when the last tick finished; zero before the first.
func (s *Scraper) LastTick() time.Time { return unixNanoTime(s.lastTickEnd.Load()) }

// Ticks is the number of ticks completed, whatever their targets gave.
func (s *Scraper) Ticks() int64 { return s.ticks.Load() }

// LastSuccess is when a target was last scraped successfully; zero if never.
func (s *Scraper) LastSuccess() time.Time { return unixNanoTime(s.lastSuccess.Load()) }

func unixNanoTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

type job struct {
	source string
	target Target
}

// Tick scrapes every target once and returns when all have finished, timed
// out, or overrun their timeout (see scrapeBounded).
func (s *Scraper) Tick(ctx context.Context) {
	start := s.cfg.Clock.Now()
	var jobs []job
	for _, src := range s.cfg.Sources {
		targets, err := src.Targets()
		if err != nil {
			klog.ErrorS(err, "Listing scrape targets failed", "source", src.Name())
			continue
		}
		keep := make(map[string]struct{}, len(targets))
		ids := make(map[string]struct{}, len(targets))
		for _, t := range targets {
			jobs = append(jobs, job{source: src.Name(), target: t})
			for _, n := range t.Nodes() {
				keep[n] = struct{}{}
			}
			ids[t.ID()] = struct{}{}
		}
		s.cfg.Sink.Prune(src.Name(), keep)
		if s.cfg.Series != nil {
			s.cfg.Series.PruneSeries(src.Name(), ids)
		}
	}
	if s.cfg.EarlyDelay > 0 {
		byNode := make(map[string][]job, len(jobs))
		for _, j := range jobs {
			for _, n := range j.target.Nodes() {
				byNode[n] = append(byNode[n], j)
			}
		}
		s.mu.Lock()
		s.byNode = byNode
		s.mu.Unlock()
	}

	queue := make(chan job)
	var wg sync.WaitGroup
	workers := min(s.cfg.Concurrency, len(jobs))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				s.scrapeBounded(ctx, j)
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case queue <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()

	s.recordHealth(jobs)
	end := s.cfg.Clock.Now()
	if !s.cfg.Secondary {
		cycleDuration.Observe(end.Sub(start).Seconds())
		lastTick.Set(float64(end.Unix()))
	}
	s.lastTickEnd.Store(end.UnixNano())
	s.ticks.Add(1)
	klog.V(2).InfoS("Scrape tick finished", "targets", len(jobs), "duration", end.Sub(start))
}

// scrapeBounded scrapes one target, as scrape does, and returns when the
// scrape has ended or has overrun its timeout by the grace, whichever comes
// first. A target that overruns — one that does not honour its context,
// such as one still decoding a hostile answer — goes on in its own
// goroutine and is stored when it ends, but gives its worker back: no other
// target waits for it, in this tick or the next, and until it ends the
// target itself is skipped as busy.
func (s *Scraper) scrapeBounded(ctx context.Context, j job) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.scrape(ctx, j)
	}()
	timer := s.cfg.Clock.NewTimer(s.cfg.Timeout + s.overrunGrace())
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C():
		overruns.WithLabelValues(j.source).Inc()
		klog.InfoS("Scrape target overran its timeout; not waiting for it", "target", j.target.ID(), "timeout", s.cfg.Timeout)
	case <-ctx.Done():
	}
}

// overrunGrace is how long past its timeout a scrape is waited for: long
// enough for a target that honours its context to return, short of the
// next tick.
func (s *Scraper) overrunGrace() time.Duration {
	return max(min(time.Second, (s.cfg.Resolution-s.cfg.Timeout)/2), 0)
}

// scrape scrapes one target and stores the result, unless the target is
// being scraped already: that scrape's result is as fresh.
func (s *Scraper) scrape(ctx context.Context, j job) {
	id := j.target.ID()
	s.mu.Lock()
	if s.busy[id] {
		s.mu.Unlock()
		return
	}
	s.busy[id] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.busy, id)
		s.mu.Unlock()
	}()
	s.scrapeTarget(ctx, j)
}

func (s *Scraper) scrapeTarget(ctx context.Context, j job) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := s.cfg.Clock.Now()
	batch, err := j.target.Scrape(ctx)
	now := s.cfg.Clock.Now()
	scrapeDuration.WithLabelValues(j.source).Observe(now.Sub(start).Seconds())

	if batch == nil {
		if err == nil {
			err = fmt.Errorf("target returned no data")
		}
		reason := Reason(err)
		scrapeFailures.WithLabelValues(j.source, reason).Inc()
		s.cfg.Sink.Failed(j.source, j.target.Nodes(), err, now)
		s.setHealth(j.target.ID(), reason, err)
		return
	}
	if err != nil {
		partialScrapes.WithLabelValues(j.source).Inc()
	}
	s.setPartial(j.target.ID(), err)
	s.cfg.Sink.Store(j.source, j.target.Nodes(), batch, now)
	if s.cfg.Series != nil {
		s.cfg.Series.StoreSeries(j.source, j.target.ID(), batch.Series, now)
	}
	s.lastSuccess.Store(now.UnixNano())
	s.setHealth(j.target.ID(), "", nil)
}

// setHealth logs a target's state only when it changes, so a node that stays
// down produces one line, not one per tick.
func (s *Scraper) setHealth(id, reason string, err error) {
	s.mu.Lock()
	prev, known := s.health[id]
	s.health[id] = reason
	s.mu.Unlock()
	switch {
	case reason != "" && prev != reason:
		klog.ErrorS(err, "Scrape target failing", "target", id, "reason", reason)
	case reason == "" && known && prev != "":
		klog.InfoS("Scrape target recovered", "target", id)
	}
}

// setPartial logs when a target starts and stops leaving out malformed
// points (err is what it left out, nil for none): once per change, not per
// scrape.
func (s *Scraper) setPartial(id string, err error) {
	s.mu.Lock()
	was := s.partial[id]
	if err != nil {
		s.partial[id] = true
	} else {
		delete(s.partial, id)
	}
	s.mu.Unlock()
	switch {
	case err != nil && !was:
		klog.ErrorS(err, "Scrape target leaving out malformed points", "target", id)
	case err == nil && was:
		klog.InfoS("Scrape target no longer leaving out points", "target", id)
	}
}

// recordHealth publishes per-source counts of healthy and failing targets and
// forgets targets that are gone.
func (s *Scraper) recordHealth(jobs []job) {
	type counts struct{ healthy, failing int }
	bySource := map[string]*counts{}
	for _, src := range s.cfg.Sources {
		bySource[src.Name()] = &counts{}
	}
	s.mu.Lock()
	seen := make(map[string]struct{}, len(jobs))
	for _, j := range jobs {
		id := j.target.ID()
		seen[id] = struct{}{}
		if s.health[id] == "" {
			bySource[j.source].healthy++
		} else {
			bySource[j.source].failing++
		}
	}
	for id := range s.health {
		if _, ok := seen[id]; !ok {
			delete(s.health, id)
		}
	}
	for id := range s.partial {
		if _, ok := seen[id]; !ok {
			delete(s.partial, id)
		}
	}
	s.lastJobs = jobs
	s.mu.Unlock()
	for name, c := range bySource {
		targetsGauge.WithLabelValues(name, "healthy").Set(float64(c.healthy))
		targetsGauge.WithLabelValues(name, "failing").Set(float64(c.failing))
	}
}

// EachHealthy calls f with the source and nodes of each target of the last
// tick whose last scrape succeeded, until f returns false.
func (s *Scraper) EachHealthy(f func(source string, nodes []string) bool) {
	s.mu.Lock()
	var healthy []job
	for _, j := range s.lastJobs {
		if reason, known := s.health[j.target.ID()]; known && reason == "" {
			healthy = append(healthy, j)
		}
	}
	s.mu.Unlock()
	for _, j := range healthy {
		if !f(j.source, j.target.Nodes()) {
			return
		}
	}
}

// TargetErrors returns the IDs of targets whose last scrape failed, with the
// reason. It is meant for health messages, not for hot paths.
func (s *Scraper) TargetErrors() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, r := range s.health {
		if r != "" {
			out[id] = r
		}
	}
	return out
}
