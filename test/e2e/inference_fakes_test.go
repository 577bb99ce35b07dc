//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podEndpoints plays the Prometheus endpoint of every Running pod of some
// namespaces: kwok gives pods addresses in the cluster's pod CIDR, inside
// 127.0.0.0/8 (test/cluster's PodCIDR, 127.16.0.0/16), which Linux routes to
// the loopback interface, so a listener on the pod's own IP and the port
// it announces is reached exactly where the server dials the pod. Nothing
// leaves the machine. Each pod's body comes from render at each request.
type podEndpoints struct {
	port int
	// serve are the namespaces whose pods get an endpoint; listed are
	// listed too (running) but not served.
	serve, listed []string
	render        func(pod *corev1.Pod) (body string, ok bool) // ok false answers 500

	mu      sync.Mutex
	byIP    map[string]*corev1.Pod // the pod each listening IP stands for
	servers map[string]*http.Server
	pods    map[string]*corev1.Pod // the Running pods last listed, by namespace/name
	errs    []error
	// credentials counts the requests that carried an Authorization
	// header: the server sends its credentials to no pod endpoint.
	credentials atomic.Int64
}

// startPodEndpoints serves the Running pods of the serve namespaces on
// port, and lists those of listed too, polling the pods every 200 ms until
// the test ends.
func startPodEndpoints(t *testing.T, port int, render func(*corev1.Pod) (string, bool), serve []string, listed ...string) *podEndpoints {
	t.Helper()
	e := &podEndpoints{port: port, serve: serve, listed: listed, render: render,
		byIP: map[string]*corev1.Pod{}, servers: map[string]*http.Server{}, pods: map[string]*corev1.Pod{}}
	stop := background(suite.ctx, 200*time.Millisecond, e.sync)
	t.Cleanup(func() {
		stop()
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, s := range e.servers {
			_ = s.Close()
		}
		if err := errors.Join(e.errs...); err != nil {
			t.Errorf("pod endpoints: %v", err)
		}
	})
	return e
}

func (e *podEndpoints) sync(ctx context.Context) {
	running := map[string]*corev1.Pod{}
	for _, ns := range slices.Concat(e.serve, e.listed) {
		list, err := suite.cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return // the next poll tries again; ctx may be done
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				running[p.Namespace+"/"+p.Name] = p
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods = running
	seen := map[string]bool{}
	for key, p := range running {
		if !slices.Contains(e.serve, p.Namespace) {
			continue
		}
		ip := p.Status.PodIP
		if seen[ip] {
			e.errs = append(e.errs, fmt.Errorf("pod %s shares IP %s with another pod", key, ip))
			continue
		}
		seen[ip] = true
		e.byIP[ip] = p
		if _, ok := e.servers[ip]; !ok {
			if err := e.listen(ip); err != nil {
				e.errs = append(e.errs, err)
			}
		}
	}
	for ip, s := range e.servers {
		if !seen[ip] {
			_ = s.Close()
			delete(e.servers, ip)
			delete(e.byIP, ip)
		}
	}
}

// listen serves ip:port; called with mu held.
func (e *podEndpoints) listen(ip string) error {
	addr := net.JoinHostPort(ip, strconv.Itoa(e.port))
	if parsed := net.ParseIP(ip); parsed == nil || !parsed.IsLoopback() {
		return fmt.Errorf("pod IP %s is not a loopback address: the fake endpoints serve loopback only", ip)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Context().Value(http.LocalAddrContextKey).(net.Addr).String())
		e.mu.Lock()
		pod := e.byIP[host]
		e.mu.Unlock()
		if r.Header.Get("Authorization") != "" {
			e.credentials.Add(1)
		}
		if pod == nil || r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		body, ok := e.render(pod)
		if !ok {
			http.Error(w, "engine failing", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = fmt.Fprint(w, body)
	})}
	e.servers[ip] = srv
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// running returns the Running pods of namespace last listed, on node or
// ("") any node, by name.
func (e *podEndpoints) running(namespace, node string) []*corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range e.pods {
		if p.Namespace == namespace && (node == "" || p.Spec.NodeName == node) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// vllmText renders a vLLM engine's scheduler and cache gauges as
// vllm/v1/metrics/loggers.py names and labels them, between families the
// server must skip.
func vllmText(model string, waiting, running, kv float64) string {
	return fmt.Sprintf("# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n"+
		"vllm:num_requests_running{engine=\"0\",model_name=%[1]q} %[2]g\n"+
		"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\n"+
		"vllm:num_requests_waiting{engine=\"0\",model_name=%[1]q} %[3]g\n"+
		"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine=\"0\",model_name=%[1]q} 12345\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=%[1]q} %[4]g\n"+
		"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 4.2\n", model, running, waiting, kv)
}

// sglangText renders SGLang's queue and token-usage gauges as
// python/sglang/srt/metrics/collector.py names them.
func sglangText(model string, queue, tokenUsage float64) string {
	return fmt.Sprintf("# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=%q} %g\n"+
		"# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=%q} %g\n"+
		"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=%q} 1\n", model, queue, model, tokenUsage, model)
}

// dcgmText renders a DCGM exporter's utilization and framebuffer gauges
// with the attribution labels dcgm-exporter gives them: one GPU per pod,
// and a GPU no pod holds.
func dcgmText(node string, pods []*corev1.Pod, util func(*corev1.Pod) float64) string {
	var b strings.Builder
	b.WriteString("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
	for i, p := range pods {
		fmt.Fprintf(&b, "DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\",UUID=\"GPU-%04d\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=%q,container=\"main\",namespace=%q,pod=%q} %g\n",
			i, i, node, p.Namespace, p.Name, util(p))
	}
	fmt.Fprintf(&b, "DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\",UUID=\"GPU-idle\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=%q} 0\n", len(pods), node)
	b.WriteString("# TYPE DCGM_FI_DEV_FB_USED gauge\n")
	for i, p := range pods {
		fmt.Fprintf(&b, "DCGM_FI_DEV_FB_USED{gpu=\"%d\",UUID=\"GPU-%04d\",container=\"main\",namespace=%q,pod=%q} 40000\n", i, i, p.Namespace, p.Name)
	}
	b.WriteString("# TYPE DCGM_FI_DEV_SM_CLOCK gauge\nDCGM_FI_DEV_SM_CLOCK{gpu=\"0\"} 1980\n")
	return b.String()
}
