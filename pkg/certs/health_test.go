package certs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

// step moves the clock by after, then does what, then probes.
type step struct {
	after     time.Duration
	what      func(*Health)
	ready     bool
	live      bool
	narrative string
}

func renewal(holder string, at time.Time) func(*Health) {
	return func(h *Health) {
		h.observed(&resourcelock.LeaderElectionRecord{HolderIdentity: holder, RenewTime: metav1.NewTime(at)})
	}
}

func TestHealth(t *testing.T) {
	synced := func(err error) func(*Health) { return func(h *Health) { h.synced(err) } }
	lead := func(h *Health) { h.StartedLeading() }
	boom := errors.New("boom")
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "a standby that sees the leader renew stays ready", steps: []step{
			{after: 0, ready: true, live: true, narrative: "just started"},
			{after: 40 * time.Second, what: renewal("a", t0.Add(40*time.Second)), ready: true, live: true},
			{after: 40 * time.Second, what: renewal("a", t0.Add(80*time.Second)), ready: true, live: true},
		}},
		{name: "a standby that sees no renewal turns unready, never unlive", steps: []step{
			{after: 40 * time.Second, what: renewal("a", t0), ready: true, live: true},
			{after: 40 * time.Second, what: renewal("a", t0), ready: true, live: true, narrative: "the same RenewTime again"},
			{after: 6 * time.Second, ready: false, live: true, narrative: "46s since the first observation"},
			{after: time.Hour, ready: false, live: true},
			{after: 0, what: renewal("", t0.Add(time.Hour)), ready: false, live: true, narrative: "a released Lease has no holder"},
			{after: 0, what: renewal("b", t0.Add(time.Hour)), ready: true, live: true},
		}},
		{name: "no Lease read at all turns a standby unready", steps: []step{
			{after: 45 * time.Second, ready: true, live: true},
			{after: time.Second, ready: false, live: true},
		}},
		{name: "a leader that syncs is ready", steps: []step{
			{after: time.Hour, what: lead, ready: true, live: true, narrative: "leading starts the bound afresh"},
			{after: 40 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 40 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 45 * time.Second, ready: true, live: true},
		}},
		{name: "a leader whose syncs fail is unready but live", steps: []step{
			{after: 0, what: lead, ready: true, live: true},
			{after: 15 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 30 * time.Second, what: synced(boom), ready: true, live: true},
			{after: 16 * time.Second, what: synced(boom), ready: false, live: true},
			{after: 10 * time.Minute, what: synced(boom), ready: false, live: true},
			{after: 0, what: synced(nil), ready: true, live: true},
		}},
		{name: "a leader whose sync hangs is unlive, and a standby is not", steps: []step{
			{after: 0, what: lead, ready: true, live: true},
			{after: 5 * time.Second, what: synced(nil), ready: true, live: true},
			{after: 5 * time.Minute, ready: false, live: true},
			{after: time.Second, ready: false, live: false},
			{after: 0, what: func(h *Health) { h.StoppedLeading() }, ready: false, live: true, narrative: "no renewal seen since leading started"},
		}},
		{name: "a leader that never returns from its first sync is unlive", steps: []step{
			{after: time.Minute, what: lead, ready: true, live: true},
			{after: 5*time.Minute + time.Second, ready: false, live: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			h := NewHealth(HealthConfig{ReadyWithin: 45 * time.Second, LiveWithin: 5 * time.Minute, Clock: clk})
			type probe struct{ Ready, Live bool }
			for i, s := range tt.steps {
				clk.Step(s.after)
				if s.what != nil {
					s.what(h)
				}
				got := probe{Ready: h.Ready(nil) == nil, Live: h.Live(nil) == nil}
				if diff := cmp.Diff(probe{Ready: s.ready, Live: s.live}, got); diff != "" {
					t.Errorf("step %d (%s; ready: %v, live: %v) (-want +got):\n%s", i, s.narrative, h.Ready(nil), h.Live(nil), diff)
				}
			}
		})
	}
}

// TestHealthFollowsSyncs runs the controller's own Sync: a sync that
// cannot read its Secrets leaves the replica live but, past the bound,
// unready.
func TestHealthFollowsSyncs(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	kube := newKube()
	r := newRig(clk, kube, nil)
	h := NewHealth(HealthConfig{ReadyWithin: 45 * time.Second, LiveWithin: 5 * time.Minute, Clock: clk})
	r.ctrl.cfg.Health = h
	h.StartedLeading()
	r.sync(t)
	refuse("get", "secrets")(r)
	for range 4 {
		clk.Step(15 * time.Second)
		if _, err := r.ctrl.Sync(context.Background()); err == nil {
			t.Fatal("sync succeeded without its Secrets")
		}
	}
	if err := h.Ready(nil); err == nil {
		t.Error("ready after 60s of failed syncs")
	}
	if err := h.Live(nil); err != nil {
		t.Errorf("not live while syncs return: %v", err)
	}
}
