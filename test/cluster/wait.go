package cluster

import (
	"context"
	"fmt"
	"time"
)

const (
	pollInterval = 100 * time.Millisecond
	checkTimeout = 5 * time.Second
)

// waitUntil polls check every pollInterval, each call bounded by
// checkTimeout; see PollUntil.
func waitUntil(ctx context.Context, what string, watch []*Process, check func(context.Context) error) error {
	return PollUntil(ctx, what, pollInterval, checkTimeout, watch, check)
}

// PollUntil calls check every interval, each call bounded by callTimeout,
// until it returns nil. It fails early when one of the watched processes
// exits, and otherwise when ctx is done, reporting the last error from check.
func PollUntil(ctx context.Context, what string, interval, callTimeout time.Duration, watch []*Process, check func(context.Context) error) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var lastErr error
	for {
		checkCtx, cancel := context.WithTimeout(ctx, callTimeout)
		err := check(checkCtx)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		for _, p := range watch {
			if p == nil {
				continue
			}
			select {
			case <-p.Done():
				return fmt.Errorf("waiting for %s: %w; last error: %w", what, p.exitedError(), lastErr)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %w)", what, ctx.Err(), lastErr)
		case <-ticker.C:
		}
	}
}
