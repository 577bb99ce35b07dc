package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// PollInterval is how often Poll checks.
	PollInterval = 250 * time.Millisecond
	checkTimeout = 10 * time.Second
)

// Poll is PollUntil every PollInterval, each call bounded by ten seconds.
func Poll(ctx context.Context, what string, watch []*Process, check func(context.Context) error) error {
	return PollUntil(ctx, what, PollInterval, checkTimeout, watch, check)
}

// PollUntil calls check every interval, each call bounded by callTimeout,
// until it returns nil. It fails early when one of the watched processes
// exits, and otherwise when ctx is done, reporting the last error from check.
func PollUntil(ctx context.Context, what string, interval, callTimeout time.Duration, watch []*Process, check func(context.Context) error) error {
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		checkCtx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if lastErr = check(checkCtx); lastErr == nil {
			return true, nil
		}
		for _, p := range watch {
			if p != nil && p.exited() {
				return false, p.exitedError()
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w (last error: %w)", what, err, lastErr)
	}
	return nil
}
