package podvalues

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// Collector is the pod-endpoint source as the loop runs it
// (*promscrape.Source). Collect is called from one goroutine at a time.
type Collector interface {
	Collect(ctx context.Context) (promscrape.Batch, []promscrape.TargetError)
}

// LoopConfig configures a Loop.
type LoopConfig struct {
	Source Collector
	Store  *Store
	Clock  clock.WithTicker
	// Interval is the time between two collections; each collection must
	// end within it.
	Interval time.Duration
}

// Loop collects every Interval into the Store and logs each target's
// failure once when it starts or its reason changes, and once when it
// ends, never at every tick.
type Loop struct {
	cfg LoopConfig
	// failing is each failing target's reason, as last logged.
	failing map[string]string
	// ticks counts the collections completed.
	ticks atomic.Int64
}

// NewLoop returns a loop; nothing runs until Run.
func NewLoop(cfg LoopConfig) *Loop {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Loop{cfg: cfg, failing: map[string]string{}}
}

// Run collects at once and then every Interval until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	t := l.cfg.Clock.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		l.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Tick runs one collection under a deadline of one Interval and stores
// its values.
func (l *Loop) Tick(ctx context.Context) {
	start := l.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Interval)
	defer cancel()
	batch, errs := l.cfg.Source.Collect(ctx)
	l.cfg.Store.Update(batch)
	l.logChanges(errs)
	tickDuration.Observe(l.cfg.Clock.Since(start).Seconds())
	lastTick.Set(float64(l.cfg.Clock.Now().Unix()))
	l.ticks.Add(1)
}

// Ticks is the number of collections completed, whatever their targets
// gave; safe for concurrent use.
func (l *Loop) Ticks() int64 { return l.ticks.Load() }

func (l *Loop) logChanges(errs []promscrape.TargetError) {
	now := make(map[string]string, len(errs))
	for _, e := range errs {
		now[e.ID] = e.Reason
		if prev, ok := l.failing[e.ID]; !ok || prev != e.Reason {
			klog.ErrorS(e.Err, "Scrape of a pod endpoint failed", "target", e.ID, "reason", e.Reason)
		}
	}
	for id, reason := range l.failing {
		if _, still := now[id]; !still {
			klog.InfoS("Pod endpoint scraped again, or no longer a target", "target", id, "previousReason", reason)
		}
	}
	l.failing = now
}

// Failing returns the targets that failed at the last tick and why; for
// tests and readiness messages.
func (l *Loop) Failing() map[string]string {
	out := make(map[string]string, len(l.failing))
	for k, v := range l.failing {
		out[k] = v
	}
	return out
}
