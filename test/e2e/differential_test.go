//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// cpuTolerance is how far the two servers' CPU may differ, in nanocores.
//
// The comparison waits until both servers' windows begin after every usage
// change and pod placement, so the rate is constant over every window either
// server uses. The fleet's sample instants are whole seconds, named exactly
// by both the Summary API (seconds) and the Prometheus text (milliseconds),
// so both windows are whole seconds, at least 5s (the smaller resolution). The
// counters are exact nanoseconds in the Summary API and float64 seconds in
// the Prometheus text (relative error 2^-53: under 1e-6 ns for the counters
// here). Each server then rounds a rate to whole nanocores, per container
// for metrics-server's pod sum. So the two agree to a few nanocores per
// container; 1000 nanocores (1 microcore) covers every pod and node here
// with a wide margin and is still 100 times finer than kubectl's display.
const cpuTolerance = 1000

// TestMatchesMetricsServer runs metrics-server v0.8.0 against the same fleet: both
// report the same memory, and CPU within cpuTolerance, for every pod and node.
func TestMatchesMetricsServer(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	const ns = "e2e-diff"
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	for _, d := range []struct {
		spec  env.DeploymentSpec
		usage fakekubelet.Usage
	}{
		{env.DeploymentSpec{Namespace: ns, Name: "two", Replicas: 4, Containers: []string{"a", "b"}, CPURequest: "50m"},
			fakekubelet.Usage{CPUNanoCores: 333_333_333, MemoryBytes: 77 << 20}},
		{env.DeploymentSpec{Namespace: ns, Name: "one", Replicas: 2, CPURequest: "1"},
			fakekubelet.Usage{CPUNanoCores: 1_250_000_007, MemoryBytes: 200<<20 + 12345}},
	} {
		suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: d.spec.Selector()}, d.usage)
		must(t, env.CreateDeployment(ctx, client, d.spec))
		_, err := env.WaitForRunningPods(ctx, client, ns, d.spec.Selector(), int(d.spec.Replicas))
		must(t, err)
	}
	// metrics-server v0.8.0 refuses a resolution below 10s.
	ms, err := env.StartMetricsServer(ctx, suite.cluster, "metrics-server", suite.binDir, suite.fleet.CAFile, max(10*time.Second, suite.resolution), suite.timeout)
	must(t, err)
	t.Cleanup(func() { _ = ms.Process.Stop() })
	// Every pod is placed on the fleet by now (both servers list only pods
	// the fleet reports), and nothing changes usage from here on.
	settled := time.Now()

	gms, err := metricsclient.NewForConfig(suite.server.RESTConfig())
	must(t, err)
	ref, err := metricsclient.NewForConfig(ms.RESTConfig())
	must(t, err)
	var report string
	must(t, poll(ctx, "both servers to agree", func(ctx context.Context) error {
		a, err := snapshot(ctx, gms)
		if err == nil {
			err = a.settledSince(settled)
		}
		if err != nil {
			return fmt.Errorf("group-metrics-server: %w", err)
		}
		b, err := snapshot(ctx, ref)
		if err == nil {
			err = b.settledSince(settled)
		}
		if err != nil {
			return fmt.Errorf("metrics-server: %w", err)
		}
		report, err = comparison{a: "group-metrics-server", b: "metrics-server"}.compare(a, b)
		return err
	}))
	t.Logf("agreement %v after metrics-server was ready:\n%s", time.Since(settled).Round(time.Millisecond), report)
}

// usage is one pod's or node's reading.
type usage struct {
	cpuNano, memory int64
	start, end      time.Time
}

// metricsSnapshot holds every pod ("ns/name") and node ("node/name") a
// server reports.
type metricsSnapshot map[string]usage

func snapshot(ctx context.Context, c metricsclient.Interface) (metricsSnapshot, error) {
	out := metricsSnapshot{}
	pods, err := c.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		out[p.Namespace+"/"+p.Name] = podUsage(p)
	}
	nodes, err := c.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes.Items {
		out["node/"+n.Name] = usage{cpuNano: n.Usage.Cpu().ScaledValue(-9), memory: n.Usage.Memory().Value(),
			start: n.Timestamp.Add(-n.Window.Duration), end: n.Timestamp.Time}
	}
	return out, nil
}

func podUsage(p metricsv1beta1.PodMetrics) usage {
	u := usage{start: p.Timestamp.Add(-p.Window.Duration), end: p.Timestamp.Time}
	for _, c := range p.Containers {
		u.cpuNano += c.Usage.Cpu().ScaledValue(-9)
		u.memory += c.Usage.Memory().Value()
	}
	return u
}

func (s metricsSnapshot) only(keep func(key string) bool) metricsSnapshot {
	out := metricsSnapshot{}
	for k, u := range s {
		if keep(k) {
			out[k] = u
		}
	}
	return out
}

func isNode(key string) bool { return strings.HasPrefix(key, "node/") }

// settledSince reports an error unless every window begins at or after t,
// to the second the fleet's sample instants are quantised to.
func (s metricsSnapshot) settledSince(t time.Time) error {
	t = t.Truncate(time.Second).Add(time.Second)
	for k, u := range s {
		if u.start.Before(t) {
			return fmt.Errorf("%s: window starts %v, before %v", k, u.start.Format(time.TimeOnly), t.Format(time.TimeOnly))
		}
	}
	return nil
}

// comparison compares two snapshots, whose names are a and b: the same pods
// and nodes, memory exactly and CPU within cpuTolerance. podsOnly leaves
// node values out of it (a node must still be on both sides): nodes sum
// every pod on them, including other tests' pods that may still be going
// away.
type comparison struct {
	a, b     string
	podsOnly bool
}

// compare returns a line per pod and node, and an error naming every
// difference.
func (c comparison) compare(x, y metricsSnapshot) (string, error) {
	var diffs, lines []string
	keys := slices.AppendSeq(slices.Collect(maps.Keys(x)), maps.Keys(y))
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		u, inX := x[k]
		v, inY := y[k]
		switch {
		case !inY:
			diffs = append(diffs, k+": only "+c.a+" reports it")
			continue
		case !inX:
			diffs = append(diffs, k+": only "+c.b+" reports it")
			continue
		}
		d := math.Abs(float64(u.cpuNano - v.cpuNano))
		lines = append(lines, fmt.Sprintf("  %-40s cpu %12dn vs %12dn (diff %.0fn)  memory %d vs %d", k, u.cpuNano, v.cpuNano, d, u.memory, v.memory))
		if c.podsOnly && isNode(k) {
			continue
		}
		if d > cpuTolerance || u.memory != v.memory {
			diffs = append(diffs, fmt.Sprintf("%s: cpu %dn vs %dn, memory %d vs %d", k, u.cpuNano, v.cpuNano, u.memory, v.memory))
		}
	}
	if len(diffs) > 0 {
		return strings.Join(lines, "\n"), fmt.Errorf("%s vs %s: %s", c.a, c.b, strings.Join(diffs, "; "))
	}
	return strings.Join(lines, "\n"), nil
}
