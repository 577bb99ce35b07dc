package server

import (
	"fmt"
	"sync/atomic"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// Bounds of a replica's start (startupGate).
const (
	// minStartupTicks is the ticks before which nothing is known. A
	// target's usage may need a second (a counter's rate needs two samples,
	// unless it started recently: store.rates), which Complete tells.
	minStartupTicks = 1
	// maxStartupTicks bounds the wait for targets whose usage stays
	// incomplete (a container that never yields a rate): the replica is
	// ready at the latest after this many ticks, two and a half
	// resolutions after it began scraping.
	maxStartupTicks = 4
)

// startupGate keeps a starting replica out of service until it answers as
// a replica that kept running would: until the scraper has completed the
// ticks usage needs, and every target that answers has given usage for
// everything it reports (a target that failed at the first tick, or was
// slow, has only one sample). A target that does not answer does not hold
// the replica back: it has nothing to give either replica. Once open, the
// gate stays open: a pod starting or a target failing later must not take
// every replica out of service at once.
type startupGate struct {
	scraper *sources.Scraper
	store   *store.Store
	open    atomic.Bool
}

func (g *startupGate) check() error {
	if g.open.Load() {
		return nil
	}
	ticks := g.scraper.Ticks()
	if ticks < minStartupTicks {
		return fmt.Errorf("starting: %d of the %d scrape ticks usage needs at least", ticks, minStartupTicks)
	}
	if ticks < maxStartupTicks {
		answering, incomplete := 0, 0
		g.scraper.EachHealthy(func(source string, nodes []string) bool {
			answering++
			if !g.store.Complete(source, nodes) {
				incomplete++
			}
			return true
		})
		if incomplete > 0 {
			return fmt.Errorf("starting: %d of %d answering targets have not given usage for all they report", incomplete, answering)
		}
	}
	g.open.Store(true)
	return nil
}
