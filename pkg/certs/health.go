package certs

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// HealthConfig configures a Health.
type HealthConfig struct {
	// ReadyWithin is the longest time a ready replica goes without what it
	// waits for: a completed sync when it leads, a renewal of some
	// replica's Lease when it does not.
	ReadyWithin time.Duration
	// LiveWithin is the longest time a leading replica goes without a sync
	// attempt returning, successful or not, before it is taken for stuck.
	// Longer than ReadyWithin: a restart is for a replica that hangs, not
	// for one whose API calls fail.
	LiveWithin time.Duration
	Clock      clock.PassiveClock
}

// Health tracks one controller replica for its probes: whether it leads,
// when its last sync returned and completed, and when it last saw a
// replica renew the Lease. Its methods are safe to call concurrently.
type Health struct {
	cfg HealthConfig

	mu       sync.Mutex
	leading  bool
	since    time.Time // start, or start of leading
	attempt  time.Time // last sync that returned
	success  time.Time // last sync that completed
	renewed  time.Time // last Lease renewal observed
	lastSeen time.Time // RenewTime of the last record read
}

// NewHealth returns the health of a replica that has just started.
func NewHealth(cfg HealthConfig) *Health {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	now := cfg.Clock.Now()
	return &Health{cfg: cfg, since: now, renewed: now}
}

// StartedLeading records that this replica leads from now on.
func (h *Health) StartedLeading() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leading, h.since = true, h.cfg.Clock.Now()
	h.renewed = h.since
}

// StoppedLeading records that this replica no longer leads.
func (h *Health) StoppedLeading() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leading = false
}

// synced records a sync that returned, completed when err is nil.
func (h *Health) synced(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock.Now()
	h.attempt = now
	if err == nil {
		h.success = now
	}
}

// observed records a Lease record read or written. A renewal counts when
// the record has a holder and a RenewTime it did not have before, timed
// on this replica's clock as client-go's elector does, so that clock skew
// between replicas does not matter.
func (h *Health) observed(r *resourcelock.LeaderElectionRecord) {
	if r == nil || r.HolderIdentity == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if rt := r.RenewTime.Time; !rt.Equal(h.lastSeen) {
		h.lastSeen, h.renewed = rt, h.cfg.Clock.Now()
	}
}

// Ready fails when this replica leads but no sync has completed within
// ReadyWithin (of the start of leading, at first), or when it does not
// lead and has seen no replica renew the Lease within ReadyWithin.
func (h *Health) Ready(*http.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock.Now()
	if h.leading {
		last := h.since
		if h.success.After(last) {
			last = h.success
		}
		if d := now.Sub(last); d > h.cfg.ReadyWithin {
			return fmt.Errorf("leading, but no certificate sync completed for %s (bound %s)", d.Truncate(time.Second), h.cfg.ReadyWithin)
		}
		return nil
	}
	if d := now.Sub(h.renewed); d > h.cfg.ReadyWithin {
		return fmt.Errorf("no replica has renewed the leader Lease for %s (bound %s): none leads", d.Truncate(time.Second), h.cfg.ReadyWithin)
	}
	return nil
}

// Live fails only when this replica leads and no sync attempt has
// returned within LiveWithin (of the start of leading, at first): it
// hangs, and a restart hands the Lease to a replica that does not.
func (h *Health) Live(*http.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.leading {
		return nil
	}
	last := h.since
	if h.attempt.After(last) {
		last = h.attempt
	}
	if d := h.cfg.Clock.Since(last); d > h.cfg.LiveWithin {
		return fmt.Errorf("leading, but no certificate sync returned for %s (bound %s)", d.Truncate(time.Second), h.cfg.LiveWithin)
	}
	return nil
}

// Lock wraps a leader election lock so that h sees every record the
// elector reads and writes.
func (h *Health) Lock(l resourcelock.Interface) resourcelock.Interface {
	return &observedLock{Interface: l, h: h}
}

type observedLock struct {
	resourcelock.Interface
	h *Health
}

func (l *observedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.h.observed(r)
	}
	return r, raw, err
}

func (l *observedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	if err == nil {
		l.h.observed(&r)
	}
	return err
}

func (l *observedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	if err == nil {
		l.h.observed(&r)
	}
	return err
}
