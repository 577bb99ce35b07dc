//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// churnLister lists metrics every half second during the churn.
type churnLister struct {
	ep     endpoint
	sh     shape
	steady []string

	lists, fails, missing int
	staleServed           int
	maxAge                time.Duration
	maxServedAfterDelete  time.Duration
	problems              []string
}

func (l *churnLister) problem(format string, args ...any) {
	if len(l.problems) < 10 {
		l.problems = append(l.problems, fmt.Sprintf("%s %s: ", l.ep.name, l.sh.name)+fmt.Sprintf(format, args...))
	}
}

func (l *churnLister) run(ctx context.Context, c *churn) {
	every(ctx, 500*time.Millisecond, func() {
		if r := fetch(ctx, l.ep, l.sh); ctx.Err() == nil {
			l.check(r, c)
		}
	})
}

func (l *churnLister) check(r result, c *churn) {
	l.lists++
	if r.failed() {
		l.fails++
		l.problem("%v", r)
		return
	}
	if err := servesAll(r, l.steady); err != nil {
		l.missing++
		l.problem("steady pods at %s: %v", r.start.Format("15:04:05.000"), err)
	}
	prefix := c.ns + "/"
	for _, e := range r.answer.entries() {
		name, ok := strings.CutPrefix(e.key, prefix)
		if !ok {
			continue
		}
		if slices.Contains(l.steady, e.key) {
			l.maxAge = max(l.maxAge, r.end.Sub(e.timestamp))
			continue
		}
		gone, ok := c.deletedAt(name)
		if !ok || !r.start.After(gone) {
			continue
		}
		// The request started after the pod's delete returned.
		after := r.start.Sub(gone)
		l.maxServedAfterDelete = max(l.maxServedAfterDelete, after)
		if after > staleBound() {
			l.staleServed++
			l.problem("pod %s served %v after it was deleted", name, after.Round(time.Millisecond))
		}
	}
}
