package env

import (
	"context"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// PollUntil is Poll with its own interval, for waits that measure how soon
// something happens.
func PollUntil(ctx context.Context, what string, interval time.Duration, watch []*cluster.Process, check func(context.Context) error) error {
	return cluster.PollUntil(ctx, what, interval, checkTimeout, watch, check)
}
