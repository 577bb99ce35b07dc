package sources

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Soon asks for an early scrape of the targets covering node, EarlyDelay
// from now: a pod just started there, and without it the pod would wait up
// to a whole resolution for its first metrics (and an autoscaler would
// count it as missing meanwhile). Requests for a target with an early
// scrape pending join it, so a burst of pods costs one scrape. Nodes not
// known at the last tick are ignored: the next tick covers them.
func (s *Scraper) Soon(node string) {
	if s.cfg.EarlyDelay <= 0 {
		return
	}
	due := s.cfg.Clock.Now().Add(s.cfg.EarlyDelay)
	s.mu.Lock()
	added := false
	for _, j := range s.byNode[node] {
		id := j.target.ID()
		if _, pending := s.early[id]; !pending {
			s.early[id] = earlyScrape{job: j, due: due}
			added = true
		}
	}
	s.mu.Unlock()
	if added {
		select {
		case s.earlyCh <- struct{}{}:
		default:
		}
	}
}

// runEarly runs the early scrapes as they fall due, at most Concurrency at
// once, until ctx is done.
func (s *Scraper) runEarly(ctx context.Context) {
	slots := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var wait <-chan time.Time
		due := s.takeDue()
		for _, j := range due {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				earlyScrapes.WithLabelValues(j.source).Inc()
				s.scrapeBounded(ctx, j)
			}()
		}
		var timer clock.Timer
		if next, ok := s.nextDue(); ok {
			timer = s.cfg.Clock.NewTimer(max(0, next.Sub(s.cfg.Clock.Now())))
			wait = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-s.earlyCh:
		case <-wait:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// takeDue removes and returns the early scrapes due now.
func (s *Scraper) takeDue() []job {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []job
	for id, e := range s.early {
		if !e.due.After(now) {
			due = append(due, e.job)
			delete(s.early, id)
		}
	}
	return due
}

// nextDue is when the next early scrape falls due.
func (s *Scraper) nextDue() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, e := range s.early {
		if next.IsZero() || e.due.Before(next) {
			next = e.due
		}
	}
	return next, !next.IsZero()
}
