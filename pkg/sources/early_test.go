package sources

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// earlyDelay is the fixture's EarlyDelay.
const earlyDelay = 6 * time.Second

// newEarlyFixture is a scraper with early scrapes on a fake clock, over two
// counting targets a and b that report to scraped; its resolution is an
// hour, so no second tick comes during a test.
func newEarlyFixture() (clk *clocktesting.FakeClock, scraped chan string, a, b *fakeTarget, s *Scraper) {
	clk, scraped = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)), make(chan string, 16)
	a = &fakeTarget{id: "a", batch: &Batch{}, scraped: scraped}
	b = &fakeTarget{id: "b", batch: &Batch{}, scraped: scraped}
	cfg := ScraperConfig{Sink: newRecordingSink(), Clock: clk, Resolution: time.Hour, Timeout: time.Second, EarlyDelay: earlyDelay}
	return clk, scraped, a, b, kubeletScraper(cfg, a, b)
}

// TestEarlyScrapeSchedule: Soon schedules one scrape per covering target,
// due EarlyDelay after the first request, and nothing is due before.
func TestEarlyScrapeSchedule(t *testing.T) {
	clk, _, a, b, s := newEarlyFixture()
	// A tick scrapes both and learns which target covers which node.
	s.Tick(context.Background())
	if a.n.Load() != 1 || b.n.Load() != 1 {
		t.Fatalf("tick scraped a %d and b %d times, want 1 each", a.n.Load(), b.n.Load())
	}
	if _, ok := s.nextDue(); ok {
		t.Fatal("an early scrape is due before any was asked for")
	}

	// Pods start on a (twice, the second later) and on a node nothing
	// covers: one scrape of a, due at the first request's delay.
	start := clk.Now()
	s.Soon("a")
	clk.Step(time.Second)
	s.Soon("a")
	s.Soon("unknown")
	if next, ok := s.nextDue(); !ok || !next.Equal(start.Add(earlyDelay)) {
		t.Fatalf("next early scrape at %v (%v), want %v", next, ok, start.Add(earlyDelay))
	}
	clk.SetTime(start.Add(earlyDelay - time.Millisecond))
	if due := s.takeDue(); len(due) != 0 {
		t.Fatalf("%d scrapes due a millisecond before the delay", len(due))
	}
	clk.SetTime(start.Add(earlyDelay))
	due := s.takeDue()
	if len(due) != 1 || due[0].target.ID() != "a" {
		t.Fatalf("due at the delay: %v, want a only", due)
	}
	if _, ok := s.nextDue(); ok {
		t.Fatal("a scrape is still pending after the due one was taken")
	}
}

// TestEarlyScrape: the loop runs a scrape when it falls due, and a later
// request schedules another.
func TestEarlyScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk, scraped, a, b, s := newEarlyFixture()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Run(ctx)
	}()
	// The loop must be gone before the next test: it observes the
	// package's metrics, which a later test's registration writes.
	defer func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Error("the scrape loop did not stop within 10s of its context's end")
		}
	}()
	next := func() string { return recv(t, scraped, 10*time.Second, "no scrape") }
	// The first tick scrapes both and learns which target covers which node.
	first := map[string]bool{next(): true, next(): true}
	if !first["a"] || !first["b"] {
		t.Fatalf("first tick scraped %v", first)
	}

	// The loop may see the request before or after the clock moves;
	// either way the scrape falls due at the delay.
	for _, node := range []string{"a", "b"} {
		s.Soon(node)
		clk.Step(earlyDelay)
		if id := next(); id != node {
			t.Fatalf("early scrape of %s, want %s", id, node)
		}
	}
	if a.n.Load() != 2 || b.n.Load() != 2 {
		t.Errorf("scrapes: a %d, b %d; want 2 each", a.n.Load(), b.n.Load())
	}
	if _, ok := s.nextDue(); ok {
		t.Error("an early scrape is still pending")
	}
}

// TestScrapeOneAtATime: a target being scraped is not scraped again until
// that scrape ends, so its results are stored in order.
func TestScrapeOneAtATime(t *testing.T) {
	scraped, started := make(chan string, 4), make(chan string, 4)
	block := make(chan struct{})
	a := &fakeTarget{id: "a", batch: &Batch{}, block: block, scraped: scraped, started: started}
	s := NewScraper(ScraperConfig{Sink: newRecordingSink(), Resolution: time.Minute, Timeout: 10 * time.Second})
	j := job{source: "kubelet", target: a}
	done := make(chan struct{})
	go func() { s.scrape(context.Background(), j); close(done) }()
	recv(t, started, 10*time.Second, "first scrape did not start")
	s.scrape(context.Background(), j) // returns at once: a is busy
	if n := a.n.Load(); n != 1 {
		t.Fatalf("scraped %d times while busy, want 1", n)
	}
	close(block)
	<-done
	s.scrape(context.Background(), j)
	if n := a.n.Load(); n != 2 {
		t.Fatalf("scraped %d times after the first ended, want 2", n)
	}
}

// recv is the next string on ch; it fails t with why if none comes within.
func recv(t *testing.T, ch <-chan string, within time.Duration, why string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatal(why)
		return ""
	}
}
