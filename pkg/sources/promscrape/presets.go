package promscrape

import "github.com/group-metrics-server/group-metrics-server/pkg/group"

// presets are the metric sets a configuration can name. Each series name and
// type was checked against the project's own source:
//
//   - vLLM, vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger):
//     vllm:num_requests_running, vllm:num_requests_waiting and
//     vllm:kv_cache_usage_perc are gauges; vllm:gpu_cache_usage_perc is the
//     same gauge under its older name, documented there as deprecated in
//     favour of vllm:kv_cache_usage_perc, and set from the same value. Both
//     carry the labels model_name and engine. KV-cache usage is a fraction
//     (1 = 100%). vllm:time_to_first_token_seconds,
//     vllm:time_per_output_token_seconds and vllm:request_queue_time_seconds
//     are histograms in seconds with the same labels (at commit
//     005a810bc40f); the presets serve the first two's 0.9-quantile and the
//     third's mean, over the collection interval ("vllm-latency").
//   - SGLang, sgl-project/sglang python/sglang/srt/metrics/collector.py
//     (SchedulerMetricsCollector) and docs/references/production_metrics.md:
//     sglang:num_queue_reqs (requests in the waiting queue) and
//     sglang:token_usage (fraction of the KV pool in use) are gauges.
//   - The inference gateway's endpoint picker,
//     kubernetes-sigs/gateway-api-inference-extension
//     pkg/epp/metrics/metrics.go at v1.5.0:
//     inference_extension_flow_control_queue_size (requests held in the
//     picker's flow-control queue, by fairness_id, priority,
//     inference_pool, model_name and target_model_name) and
//     inference_pool_average_queue_size (the mean queue of the pool's
//     model servers, by pool name; set only while the pool has one) are
//     gauges; inference_objective_request_ttft_seconds and
//     inference_objective_request_tpot_seconds are histograms in seconds by
//     model_name and target_model_name. The flow-control queue is there
//     while no model server runs: it is the demand at zero. "inference-
//     gateway" serves the queues and the 0.9-quantiles of both latencies.
//   - DCGM, NVIDIA/dcgm-exporter etc/default-counters.csv:
//     DCGM_FI_DEV_GPU_UTIL is a gauge in percent, DCGM_FI_DEV_FB_USED a
//     gauge in MiB; both are in the default counter set.
//
// Bounds: queue lengths, usage fractions, GPU utilisation and memory are
// never negative; a fraction is at most 1 and DCGM's utilisation at most
// 100 (percent). A sample outside them is dropped, not clamped.
//
// Within one pod, several series of a metric (one per engine, one per GPU)
// combine with the metric's own rule: queues add up, usage fractions and
// utilization average, memory adds up.
//
// Member scope: the LWS project's own multi-node examples
// (kubernetes-sigs/lws docs/examples/vllm/GPU/lws.yaml and
// docs/examples/sglang/lws.yaml) run the engine's API server, and with it
// /metrics, on the leader only: vLLM's workers run Ray, SGLang's non-zero
// ranks serve no HTTP. So "vllm" and "sglang" read the leader
// (group.ScopeLeader). "vllm-data-parallel" and "sglang-data-parallel" are
// the same metrics for groups whose every pod runs an engine of its own,
// and read every member. GPU metrics come from every pod that holds a GPU,
// the workers included.
var presets = map[string][]Metric{
	"vllm":                       scoped(group.ScopeLeader, vllm),
	"vllm-data-parallel":         scoped(group.ScopeAll, vllm),
	"vllm-latency":               scoped(group.ScopeLeader, vllmLatency),
	"vllm-latency-data-parallel": scoped(group.ScopeAll, vllmLatency),
	"inference-gateway":          scoped(group.ScopeAll, gateway),
	"sglang":                     scoped(group.ScopeLeader, sglang),
	"sglang-data-parallel":       scoped(group.ScopeAll, sglang),
	"dcgm": scoped(group.ScopeAll, []Metric{
		{Name: "gpu-utilization", Series: "DCGM_FI_DEV_GPU_UTIL", Type: Gauge, Combine: CombineMean, Min: zero, Max: hundred},
		{Name: "gpu-memory-used-mib", Series: "DCGM_FI_DEV_FB_USED", Type: Gauge, Combine: CombineSum, Min: zero},
	}),
}

var (
	vllm = []Metric{
		{Name: "vllm-num-requests-waiting", Series: "vllm:num_requests_waiting", Type: Gauge, Combine: CombineSum, Min: zero},
		{Name: "vllm-num-requests-running", Series: "vllm:num_requests_running", Type: Gauge, Combine: CombineSum, Min: zero},
		{
			Name: "vllm-kv-cache-usage", Series: "vllm:kv_cache_usage_perc",
			Aliases: []string{"vllm:gpu_cache_usage_perc"}, Type: Gauge, Combine: CombineMean, Min: zero, Max: one,
		},
	}
	// vllmLatency are vLLM's latency histograms, a preset of their own so
	// that a configuration reads them only when it sets objectives on them
	// (each is some twenty series a pod and engine).
	vllmLatency = []Metric{
		{Name: "vllm-time-to-first-token-p90", Series: "vllm:time_to_first_token_seconds", Type: Histogram, Quantile: ninety},
		{Name: "vllm-time-per-output-token-p90", Series: "vllm:time_per_output_token_seconds", Type: Histogram, Quantile: ninety},
		{Name: "vllm-request-queue-time-mean", Series: "vllm:request_queue_time_seconds", Type: Histogram},
	}
	gateway = []Metric{
		{Name: "gateway-queue-size", Series: "inference_extension_flow_control_queue_size", Type: Gauge, Combine: CombineSum, Min: zero},
		{Name: "gateway-pool-average-queue-size", Series: "inference_pool_average_queue_size", Type: Gauge, Combine: CombineMax, Min: zero},
		{Name: "gateway-time-to-first-token-p90", Series: "inference_objective_request_ttft_seconds", Type: Histogram, Quantile: ninety},
		{Name: "gateway-time-per-output-token-p90", Series: "inference_objective_request_tpot_seconds", Type: Histogram, Quantile: ninety},
	}
	sglang = []Metric{
		{Name: "sglang-num-queue-reqs", Series: "sglang:num_queue_reqs", Type: Gauge, Combine: CombineSum, Min: zero},
		{Name: "sglang-token-usage", Series: "sglang:token_usage", Type: Gauge, Combine: CombineMean, Min: zero, Max: one},
	}
)

// scoped is a copy of metrics reading the members in scope.
func scoped(scope group.Scope, metrics []Metric) []Metric {
	out := append([]Metric(nil), metrics...)
	for i := range out {
		out[i].Members = scope
	}
	return out
}

var zero, one, hundred, ninety = bound(0), bound(1), bound(100), bound(0.9)

func bound(v float64) *float64 { return &v }

// Presets returns a copy of the named preset's metrics, and whether it
// exists.
func Presets(name string) ([]Metric, bool) {
	ms, ok := presets[name]
	return append([]Metric(nil), ms...), ok
}
