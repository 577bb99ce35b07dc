package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// probeNamespace holds the pods created to time first metrics.
const probeNamespace = "bench-probe"

// probeNewPods creates Probes pods, one every resolution/Probes so their
// phases against the scrape ticker spread over a whole period, and times
// each from the moment it is seen Running to its first metrics from the
// server's own port. A probe that gets none within its bound counts as
// +Inf, so a miss shows in the median rather than vanishing from it.
func (b *bench) probeNewPods(ctx context.Context, s *runningServer, res *roundResult) error {
	n := b.opts.Probes
	b.logf("round %d: %s: %d new pods, one every %v", res.round, s.kind.name, n, b.opts.Resolution/time.Duration(n))
	times := make([]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		name := fmt.Sprintf("probe-%s-%d-%d", shortName(s.kind.name), res.round, i)
		if i > 0 {
			if err := b.sleep(ctx, b.opts.Resolution/time.Duration(n), s); err != nil {
				wg.Wait()
				return err
			}
		}
		node := fmt.Sprintf("%s%d", nodePrefix, (res.round*n+i)*7919%b.opts.Nodes)
		wg.Go(func() {
			d, err := b.probe(ctx, s, name, node)
			times[i], errs[i] = d.Seconds(), err
		})
	}
	wg.Wait()
	var missed []string
	for i, err := range errs {
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, errProbeMissed) {
			return err
		}
		times[i] = math.Inf(1)
		missed = append(missed, err.Error())
	}
	res.values[figNewPod] = median(times)
	res.notef("new pods, seconds from Running to first metrics: %s", formatList(times, "%.1f"))
	for _, m := range missed {
		res.notef("MISSED: %s", m)
	}
	b.logf("round %d: %s: first metrics after %s s", res.round, s.kind.name, formatList(times, "%.1f"))
	return b.deleteProbes(ctx)
}

func shortName(server string) string {
	if server == metricsServer.name {
		return "ms"
	}
	return "gms"
}

// errProbeMissed marks a probe pod that got no metrics within its bound.
var errProbeMissed = errors.New("no metrics")

// probe creates one pod on node, waits until it is Running and then until
// the server has metrics for it.
func (b *bench) probe(ctx context.Context, s *runningServer, name, node string) (time.Duration, error) {
	client := b.cluster.Client()
	pod := b.podObject(probeNamespace, name, node, map[string]string{"app": "probe", benchLabel: "probe"})
	if _, err := client.CoreV1().Pods(probeNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create probe pod %s: %w", name, err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	watch := []*cluster.Process{s.proc, b.fleetProc}
	err := cluster.PollUntil(runCtx, "probe pod "+name+" to be Running", 100*time.Millisecond, 10*time.Second, watch,
		func(ctx context.Context) error {
			p, err := client.CoreV1().Pods(probeNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %s", p.Status.Phase)
			}
			return nil
		})
	if err != nil {
		return 0, err
	}
	running := time.Now()
	// metrics-server needs two scrapes of the node after the fleet serves
	// the pod; each scrape may take up to the request timeout.
	bound := 4*b.opts.Resolution + 2*b.opts.RequestTimeout + 30*time.Second
	metricsCtx, cancelMetrics := context.WithTimeout(ctx, bound)
	defer cancelMetrics()
	path := "/apis/metrics.k8s.io/v1beta1/namespaces/" + probeNamespace + "/pods/" + name
	err = cluster.PollUntil(metricsCtx, "metrics of "+name, 200*time.Millisecond, 10*time.Second, watch,
		func(ctx context.Context) error {
			_, err := s.getOK(ctx, path)
			return err
		})
	if err != nil {
		if ctx.Err() == nil && metricsCtx.Err() != nil {
			return 0, fmt.Errorf("%s on %s: %w %v after Running: %w", name, node, errProbeMissed, bound, err)
		}
		return 0, err
	}
	return time.Since(running), nil
}

// deleteProbes deletes the probe pods and waits until they are gone, so
// every round starts with the same pods.
func (b *bench) deleteProbes(ctx context.Context) error {
	client := b.cluster.Client()
	err := client.CoreV1().Pods(probeNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("delete probe pods: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return b.pollEvery(waitCtx, "probe pods to be deleted", 500*time.Millisecond, func(ctx context.Context) error {
		list, err := client.CoreV1().Pods(probeNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d probe pods left", len(list.Items))
		}
		return nil
	})
}

func formatList(values []float64, format string) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(parts, " ")
}
