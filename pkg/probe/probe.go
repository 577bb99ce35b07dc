// Package probe makes health checks that say in the log why they fail:
// the server's and the certificate controller's.
package probe

import (
	"net/http"
	"sync"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
)

// Logged is the health check name whose failures are logged, as
// metrics-server v0.8.0 logs its own ("Failed probe", pkg/server/server.go):
// /readyz?verbose and /livez?verbose answer "reason withheld", and
// k8s.io/apiserver logs the reason only at -v=2 (pkg/server/healthz/
// healthz.go), so without this a replica that stays unready would not say
// why. Unlike metrics-server, which logs every failed probe, a reason is
// logged when it changes, and the recovery once.
func Logged(name string, check func(*http.Request) error) healthz.HealthChecker {
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
