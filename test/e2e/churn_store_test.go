//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// storePoints is the store's series gauge, by kind.
const storePoints = "group_metrics_server_store_points"

// seriesCount is a number of node and container series.
type seriesCount struct{ nodes, containers float64 }

func (s seriesCount) String() string { return fmt.Sprintf("(%v, %v)", s.nodes, s.containers) }

// waitStoreMatches waits, for at most bound, until the server's store
// gauges (read through ep) equal the nodes and containers the sources
// report now: every fleet node with its pods' containers, and every running
// ukpd instance of an existing pod. It returns the gauges.
func waitStoreMatches(ctx context.Context, t *testing.T, ep endpoint, bound time.Duration) seriesCount {
	t.Helper()
	var got seriesCount
	must(t, pollBounded(ctx, bound, "the store's series gauges to match what the sources report", func(ctx context.Context) error {
		body, err := selfMetrics(ctx, ep)
		if err != nil {
			return err
		}
		if got.nodes, err = mustValue(body, storePoints, `kind="node"`); err != nil {
			return err
		}
		if got.containers, err = mustValue(body, storePoints, `kind="container"`); err != nil {
			return err
		}
		want, err := reportedSeries(ctx)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("gauges %v, sources report %v", got, want)
		}
		return nil
	}))
	return got
}

// reportedSeries counts what the fleet and the fake ukpd report now.
func reportedSeries(ctx context.Context) (seriesCount, error) {
	var n seriesCount
	for _, node := range suite.fleet.Nodes() {
		n.nodes++
		for _, p := range node.State(true).Pods {
			n.containers += float64(len(p.Containers))
		}
	}
	instances := suite.ukpd.Instances()
	if len(instances) == 0 {
		return n, nil
	}
	pods, err := suite.cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return n, err
	}
	exists := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			exists[p.Namespace+"/"+p.Name] = true
		}
	}
	for _, in := range instances {
		if in.State == fakeukpd.StateRunning && exists[in.Namespace+"/"+in.Pod] {
			n.containers++
		}
	}
	return n, nil
}

// settledMemory samples the RSS of pid every second for two resolutions and
// returns the median, and the Go heap in use the server reports (0 if it
// reports none).
func settledMemory(ctx context.Context, t *testing.T, ep endpoint, pid int) (rss, heap uint64) {
	t.Helper()
	var samples []uint64
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for range int(2 * suite.resolution / time.Second) {
		st, err := readProc(pid)
		must(t, err)
		samples = append(samples, st.RSS)
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-ticker.C:
		}
	}
	slices.Sort(samples)
	body, err := selfMetrics(ctx, ep)
	must(t, err)
	h, _, err := promtext.Value(body, "go_memstats_heap_inuse_bytes")
	must(t, err)
	return samples[len(samples)/2], uint64(h)
}
