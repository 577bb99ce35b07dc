package sources

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// countingTarget counts its scrapes and reports each on scraped.
type countingTarget struct {
	fakeTarget
	n       atomic.Int32
	scraped chan string
}

func (c *countingTarget) Scrape(ctx context.Context) (*Batch, error) {
	c.n.Add(1)
	b, err := c.fakeTarget.Scrape(ctx)
	c.scraped <- c.id
	return b, err
}

func TestEarlyScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	scraped := make(chan string, 16)
	a := &countingTarget{fakeTarget: fakeTarget{id: "a", batch: &Batch{}}, scraped: scraped}
	b := &countingTarget{fakeTarget: fakeTarget{id: "b", batch: &Batch{}}, scraped: scraped}
	const delay = 6 * time.Second
	s := NewScraper(ScraperConfig{
		Sources:    []Source{&fakeSource{name: "kubelet", targets: []Target{a, b}}},
		Sink:       newRecordingSink(),
		Clock:      clk,
		Resolution: time.Hour, // no second tick during the test
		Timeout:    time.Second,
		EarlyDelay: delay,
	})
	go s.Run(ctx)
	next := func() string {
		t.Helper()
		select {
		case id := <-scraped:
			return id
		case <-time.After(10 * time.Second):
			t.Fatal("no scrape")
			return ""
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case id := <-scraped:
			t.Fatalf("%s: %s scraped", what, id)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The first tick scrapes both and learns which target covers which node.
	first := map[string]bool{next(): true, next(): true}
	if !first["a"] || !first["b"] {
		t.Fatalf("first tick scraped %v", first)
	}

	// Pods start on a (twice) and on a node nothing covers. The loop may
	// see the requests before or after the clock moves; either way the
	// scrape falls due at the delay.
	s.Soon("a")
	s.Soon("a")
	s.Soon("unknown")
	clk.Step(delay - time.Millisecond)
	none("before the delay")
	clk.Step(time.Millisecond)
	if id := next(); id != "a" {
		t.Fatalf("early scrape of %s, want a", id)
	}
	none("after the early scrape")
	if a.n.Load() != 2 || b.n.Load() != 1 {
		t.Errorf("scrapes: a %d, b %d; want 2 and 1", a.n.Load(), b.n.Load())
	}

	// Once done, a later start schedules another.
	s.Soon("b")
	clk.Step(delay)
	if id := next(); id != "b" {
		t.Fatalf("early scrape of %s, want b", id)
	}
}

// TestScrapeOneAtATime: a target being scraped is not scraped again until
// that scrape ends, so its results are stored in order.
func TestScrapeOneAtATime(t *testing.T) {
	scraped := make(chan string, 4)
	block := make(chan struct{})
	a := &countingTarget{fakeTarget: fakeTarget{id: "a", batch: &Batch{}, block: block}, scraped: scraped}
	s := NewScraper(ScraperConfig{Sink: newRecordingSink(), Resolution: time.Minute, Timeout: 10 * time.Second})
	j := job{source: "kubelet", target: a}
	done := make(chan struct{})
	go func() { s.scrape(context.Background(), j); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for a.n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("first scrape did not start")
		}
		time.Sleep(time.Millisecond)
	}
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
