//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// TestNodeFaults breaks one node's kubelet at a time and checks that the
// other nodes' pods keep fresh metrics, that the server stays ready, counts
// the failure by reason in /metrics and logs it once, not once per scrape.
func TestNodeFaults(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	const ns = "e2e-faults"
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	spec := env.DeploymentSpec{Namespace: ns, Name: "spread", Replicas: 6, CPURequest: "10m"}
	if err := env.CreateDeployment(ctx, client, spec); err != nil {
		t.Fatal(err)
	}
	pods, err := env.WaitForRunningPods(ctx, client, ns, spec.Selector(), int(spec.Replicas))
	if err != nil {
		t.Fatal(err)
	}
	faulty := suite.fleet.NodeNames[0]
	node, _ := suite.fleet.Node(faulty)
	healthyPods := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != faulty {
			healthyPods[p.Name] = true
		}
	}
	if len(healthyPods) == 0 {
		t.Fatalf("every pod is on %s", faulty)
	}
	metrics, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := suite.server.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + suite.server.Address()

	for _, tc := range []struct {
		fault  fakekubelet.Fault
		reason string
	}{
		{fakekubelet.Fault{Kind: fakekubelet.FaultDead}, "connection"},
		{fakekubelet.Slow(suite.timeout + 5*time.Second), "timeout"},
		{fakekubelet.Fault{Kind: fakekubelet.FaultGarbage}, "decode"},
	} {
		t.Run(string(tc.fault.Kind), func(t *testing.T) {
			failuresBefore, err := failures(ctx, httpClient, base, tc.reason)
			if err != nil {
				t.Fatal(err)
			}
			failingBefore, recoveredBefore := logLines(t, faulty, tc.reason)
			if err := node.SetFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = node.ClearFault("") })
			setAt := time.Now()

			// Two failed scrapes: a per-scrape log line would show twice.
			// They come within two ticks, each up to the request timeout,
			// after the tick in progress.
			failCtx, cancel := context.WithTimeout(ctx, 3*(suite.resolution+suite.timeout)+10*time.Second)
			defer cancel()
			err = poll(failCtx, fmt.Sprintf("two %s failures in /metrics", tc.reason), func(ctx context.Context) error {
				n, err := failures(ctx, httpClient, base, tc.reason)
				if err != nil {
					return err
				}
				if n < failuresBefore+2 {
					all, _ := allFailures(ctx, httpClient, base)
					return fmt.Errorf("%s failures: %v, want at least %v (all: %s)", tc.reason, n, failuresBefore+2, all)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("two %s failures counted %v after the fault", tc.reason, time.Since(setAt).Round(time.Millisecond))

			// Pods elsewhere have samples taken after the fault was set.
			err = poll(ctx, "fresh metrics for the pods on healthy nodes", func(ctx context.Context) error {
				list, err := metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err
				}
				fresh := 0
				for _, m := range list.Items {
					if healthyPods[m.Name] && m.Timestamp.After(setAt) {
						fresh++
					}
				}
				if fresh != len(healthyPods) {
					return fmt.Errorf("%d of %d pods on healthy nodes have samples newer than the fault", fresh, len(healthyPods))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}

			code, body, err := env.Get(ctx, httpClient, base+"/readyz?verbose")
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusOK || !strings.Contains(body, "[+]metric-storage-ready ok") {
				t.Errorf("/readyz?verbose: %d\n%s", code, body)
			}
			if !strings.Contains(body, faulty) {
				t.Logf("/readyz?verbose does not name the failing node %s while the server is ready:\n%s", faulty, body)
			}

			failing, _ := logLines(t, faulty, tc.reason)
			if failing != failingBefore+1 {
				t.Errorf("log has %d new \"Scrape target failing\" lines for node/%s reason %s, want 1", failing-failingBefore, faulty, tc.reason)
			}

			if err := node.ClearFault(""); err != nil {
				t.Fatal(err)
			}
			err = poll(ctx, "the server to log that "+faulty+" recovered", func(context.Context) error {
				if _, recovered := logLines(t, faulty, tc.reason); recovered <= recoveredBefore {
					return fmt.Errorf("no new recovery line")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// failures returns the server's scrape failure count for reason, from
// /metrics on its own port, summed over sources.
func failures(ctx context.Context, client *http.Client, base, reason string) (float64, error) {
	code, body, err := env.Get(ctx, client, base+"/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics: status %d: %.200s", code, body)
	}
	const name = "group_metrics_server_scraper_target_failures_total{"
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || !strings.Contains(line, `reason="`+reason+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// allFailures returns the failure counter lines of /metrics.
func allFailures(ctx context.Context, client *http.Client, base string) (string, error) {
	_, body, err := env.Get(ctx, client, base+"/metrics")
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "group_metrics_server_scraper_target_failures_total{") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; "), err
}

// logLines counts the server's log lines saying node started failing for
// reason, and those saying it recovered.
func logLines(t *testing.T, node, reason string) (failing, recovered int) {
	t.Helper()
	data, err := os.ReadFile(suite.server.Process.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	target := `target="node/` + node + `"`
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, target) {
			continue
		}
		switch {
		case strings.Contains(line, `"Scrape target failing"`) && strings.Contains(line, `reason="`+reason+`"`):
			failing++
		case strings.Contains(line, `"Scrape target recovered"`):
			recovered++
		}
	}
	return failing, recovered
}
