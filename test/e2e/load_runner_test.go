//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// endpoint is one way to reach the metrics API: through kube-apiserver's aggregator, or on a server's own
// port.
type endpoint struct {
	name   string
	base   string
	client *http.Client
}

// aggregatorEndpoint reaches metrics.k8s.io through c's kube-apiserver as its admin, over plain HTTP
// requests: no client-side rate limit and no retries, so every failure is seen.
func aggregatorEndpoint(t *testing.T, c *cluster.Cluster) endpoint {
	t.Helper()
	cfg := c.RESTConfig()
	client, err := rest.HTTPClientFor(cfg)
	must(t, err)
	return endpoint{name: "aggregator", base: cfg.Host, client: client}
}

// directEndpoint reaches the server on its own port as the cluster admin.
func directEndpoint(t *testing.T, s *env.Server) endpoint {
	t.Helper()
	client, err := s.HTTPClient()
	must(t, err)
	return endpoint{name: "direct", base: "https://" + s.Address(), client: client}
}

// shape is one kind of request.
type shape struct{ name, path string }

const metricsV1beta1 = "/apis/metrics.k8s.io/v1beta1"

// listAllPods lists every pod's metrics in every namespace, as kubectl top pod -A does.
func listAllPods() shape { return shape{"list-all", metricsV1beta1 + "/pods"} }

// listSelected lists the metrics of the pods matching selector in ns, as the HPA does for its target's pods.
func listSelected(ns, selector string) shape {
	return shape{"list-selector", metricsV1beta1 + "/namespaces/" + ns + "/pods?labelSelector=" + url.QueryEscape(selector)}
}

// listNamespace lists the metrics of every pod in ns.
func listNamespace(ns string) shape {
	return shape{"list-namespace", metricsV1beta1 + "/namespaces/" + ns + "/pods"}
}

// getPod gets one pod's metrics.
func getPod(ns, name string) shape {
	return shape{"get", metricsV1beta1 + "/namespaces/" + ns + "/pods/" + name}
}

// metricsAnswer is the part of a PodMetrics, PodMetricsList or NodeMetricsList the checks read.
type metricsAnswer struct {
	Metadata  metav1.ObjectMeta `json:"metadata"`
	Timestamp metav1.Time       `json:"timestamp"`
	Items     []struct {
		Metadata  metav1.ObjectMeta `json:"metadata"`
		Timestamp metav1.Time       `json:"timestamp"`
	} `json:"items"`
}

// entry is one pod or node of an answer.
type entry struct {
	key       string // namespace/name, or name for nodes
	timestamp time.Time
}

func (a metricsAnswer) entries() []entry {
	key := func(m metav1.ObjectMeta) string {
		if m.Namespace == "" {
			return m.Name
		}
		return m.Namespace + "/" + m.Name
	}
	if a.Items == nil && a.Metadata.Name != "" {
		return []entry{{key(a.Metadata), a.Timestamp.Time}}
	}
	out := make([]entry, 0, len(a.Items))
	for _, it := range a.Items {
		out = append(out, entry{key(it.Metadata), it.Timestamp.Time})
	}
	return out
}

// result is one request's outcome.
type result struct {
	endpoint, shape string
	start, end      time.Time
	code            int
	err             error
	body            string // first bytes, when the request failed
	// retryAfter is the Retry-After header of a failed answer: the server (or kube-apiserver) tells the
	// client to send it again, and client-go does.
	retryAfter string
	answer     metricsAnswer
}

func (r result) failed() bool { return r.err != nil || r.code != http.StatusOK }

func (r result) String() string {
	what := fmt.Sprintf("%s %s at %s: ", r.endpoint, r.shape, r.start.Format("15:04:05.000"))
	if r.err != nil {
		return what + r.err.Error()
	}
	return what + fmt.Sprintf("status %d: %s", r.code, r.body)
}

// requestTimeout bounds one request of the load clients: far above any answer's time, so that only a hung
// request hits it.
const requestTimeout = 30 * time.Second

// fetch sends one GET and decodes a 200 answer.
func fetch(ctx context.Context, ep endpoint, sh shape) result {
	r := result{endpoint: ep.name, shape: sh.name, start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.base+sh.path, nil)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Accept", "application/json")
	resp, err := ep.client.Do(req)
	if err != nil {
		r.end, r.err = time.Now(), err
		return r
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	_ = resp.Body.Close()
	r.end, r.code, r.err = time.Now(), resp.StatusCode, err
	if r.failed() {
		r.body = strings.TrimSpace(string(body[:min(len(body), 300)]))
		r.retryAfter = resp.Header.Get("Retry-After")
		return r
	}
	if err := json.Unmarshal(body, &r.answer); err != nil {
		r.err = fmt.Errorf("decode answer: %w", err)
	}
	return r
}

// runLoad runs clients goroutines per endpoint, each sending the shapes in turn (client i starting at shape
// i), back to back, until d has passed or ctx is done. It returns every request's result.
func runLoad(ctx context.Context, eps []endpoint, shapes []shape, clients int, d time.Duration) []result {
	return runLoadCounting(ctx, eps, shapes, clients, d, nil)
}

// runLoadCounting is runLoad that adds one to answered (when not nil) for every request that succeeds, so a
// caller can wait for the load to be under way rather than for time to pass.
func runLoadCounting(ctx context.Context, eps []endpoint, shapes []shape, clients int, d time.Duration, answered *atomic.Int64) []result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	for _, ep := range eps {
		for i := range clients {
			wg.Go(func() {
				var mine []result
				for n := i; ctx.Err() == nil; n++ {
					r := fetch(ctx, ep, shapes[n%len(shapes)])
					if ctx.Err() != nil && r.failed() {
						break // cut short by the end of the run
					}
					mine = append(mine, r)
					if answered != nil && !r.failed() {
						answered.Add(1)
					}
				}
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return out
}

// latencyStats summarises the requests of one endpoint and shape.
type latencyStats struct {
	endpoint, shape string
	requests, fails int
	p50, p99, max   time.Duration
}

func summarize(rs []result) []latencyStats {
	groups := map[[2]string][]time.Duration{}
	fails := map[[2]string]int{}
	for _, r := range rs {
		k := [2]string{r.endpoint, r.shape}
		if r.failed() {
			fails[k]++
			continue
		}
		groups[k] = append(groups[k], r.end.Sub(r.start))
	}
	keys := slices.AppendSeq(slices.Collect(maps.Keys(groups)), maps.Keys(fails))
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	var out []latencyStats
	for _, k := range slices.Compact(keys) {
		ls := groups[k]
		slices.Sort(ls)
		s := latencyStats{endpoint: k[0], shape: k[1], requests: len(ls) + fails[k], fails: fails[k]}
		if len(ls) > 0 {
			s.p50, s.p99, s.max = percentile(ls, 50), percentile(ls, 99), ls[len(ls)-1]
		}
		out = append(out, s)
	}
	return out
}

// percentile returns the p-th percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func formatStats(stats []latencyStats, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-14s %8s %6s %8s %9s %9s %9s\n", "path", "shape", "requests", "errors", "req/s", "p50", "p99", "max")
	for _, s := range stats {
		fmt.Fprintf(&b, "%-10s %-14s %8d %6d %8.0f %9s %9s %9s\n", s.endpoint, s.shape, s.requests, s.fails,
			float64(s.requests)/elapsed.Seconds(), ms(s.p50), ms(s.p99), ms(s.max))
	}
	return b.String()
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// firstFailures returns up to n failed results, and how many failed.
func firstFailures(rs []result, n int) (out []string, total int) {
	for _, r := range rs {
		if r.failed() && len(out) < n {
			out = append(out, r.String())
		}
		total += btoi(r.failed())
	}
	return out, total
}

// selfMetrics fetches a server's /metrics through ep.
func selfMetrics(ctx context.Context, ep endpoint) (string, error) {
	code, body, err := env.Get(ctx, ep.client, ep.base+"/metrics")
	if err = cmp.Or(err, wantf(code == http.StatusOK, "/metrics: status %d: %.200s", code, body)); err != nil {
		return "", err
	}
	return body, nil
}

// mustValue is promtext.Value for a metric that must be present.
func mustValue(body, name string, labels ...string) (float64, error) {
	v, ok, err := promtext.Value(body, name, labels...)
	if err == nil && !ok {
		err = fmt.Errorf("no sample of %s%v in /metrics", name, labels)
	}
	return v, err
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// waitAnswered waits until answered reaches n, or fails after bound.
func waitAnswered(ctx context.Context, answered *atomic.Int64, n int64, bound time.Duration) error {
	return pollBounded(ctx, bound, fmt.Sprintf("%d answered requests", n), func(context.Context) error {
		got := answered.Load()
		return wantf(got >= n, "%d requests answered", got)
	})
}
