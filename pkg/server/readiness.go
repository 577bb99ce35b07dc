package server

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"

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

// loggedCheck is the health check name whose failures are logged, as
// metrics-server v0.8.0 logs its own ("Failed probe", pkg/server/server.go):
// /readyz?verbose and /livez?verbose answer "reason withheld", and
// k8s.io/apiserver logs the reason only at -v=2 (pkg/server/healthz/
// healthz.go), so without this a replica that stays unready would not say
// why. Unlike metrics-server, which logs every failed probe, a reason is
// logged when it changes, and the recovery once.
func loggedCheck(name string, check func(*http.Request) error) healthz.HealthChecker {
	var l probeLog
	return healthz.NamedCheck(name, func(r *http.Request) error {
		err := check(r)
		switch reason, changed := l.next(err); {
		case !changed:
		case err != nil:
			klog.InfoS("Failed probe", "probe", name, "err", reason)
		default:
			klog.InfoS("Probe passing", "probe", name)
		}
		return err
	})
}

// probeLog remembers the last reason a check logged. failed is kept apart
// from last because an error's text may be empty.
type probeLog struct {
	mu     sync.Mutex
	last   string
	failed bool
}

// next says whether the check's result err is to be logged (changed): a
// failure whose reason differs from the last one logged, or the first pass
// after a failure.
func (l *probeLog) next(err error) (reason string, changed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		changed, l.failed, l.last = l.failed, false, ""
		return "", changed
	}
	reason = err.Error()
	changed = !l.failed || reason != l.last
	l.failed, l.last = true, reason
	return reason, changed
}
