package probe

import (
	"errors"
	"testing"
)

// TestProbeLog: a failing check is logged when its reason changes, a passing
// one once after a failure, and nothing else.
func TestProbeLog(t *testing.T) {
	a, b := errors.New("starting: 0 of the 1 scrape ticks"), errors.New("no scrape has finished yet")
	type step struct {
		err     error
		changed bool
	}
	var l probeLog
	for i, s := range []step{{nil, false}, {a, true}, {a, false}, {b, true}, {nil, true}, {nil, false}, {a, true}} {
		reason, changed := l.next(s.err)
		if changed != s.changed {
			t.Errorf("step %d (%v): changed %v, want %v", i, s.err, changed, s.changed)
		}
		if s.err != nil && reason != s.err.Error() {
			t.Errorf("step %d: reason %q, want %q", i, reason, s.err)
		}
	}
}
