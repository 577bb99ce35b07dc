package env

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

const (
	// PollInterval is how often Poll checks.
	PollInterval = 250 * time.Millisecond
	checkTimeout = 10 * time.Second
)

// Poll calls check every PollInterval until it returns nil. It fails as soon
// as one of the watched processes exits, and otherwise when ctx is done,
// with the last error from check.
func Poll(ctx context.Context, what string, watch []*cluster.Process, check func(context.Context) error) error {
	return cluster.PollUntil(ctx, what, PollInterval, checkTimeout, watch, check)
}

// Get fetches url with client and returns the status code and body.
func Get(ctx context.Context, client *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, string(body), err
}
