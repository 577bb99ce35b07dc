package promscrape

// presets are the metric sets a configuration can name. Each series name and
// type was checked against the project's own source:
//
//   - vLLM, vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger):
//     vllm:num_requests_running, vllm:num_requests_waiting and
//     vllm:kv_cache_usage_perc are gauges; vllm:gpu_cache_usage_perc is the
//     same gauge under its older name, documented there as deprecated in
//     favour of vllm:kv_cache_usage_perc, and set from the same value. Both
//     carry the labels model_name and engine. KV-cache usage is a fraction
//     (1 = 100%).
//   - SGLang, sgl-project/sglang python/sglang/srt/metrics/collector.py
//     (SchedulerMetricsCollector) and docs/references/production_metrics.md:
//     sglang:num_queue_reqs (requests in the waiting queue) and
//     sglang:token_usage (fraction of the KV pool in use) are gauges.
//   - DCGM, NVIDIA/dcgm-exporter etc/default-counters.csv:
//     DCGM_FI_DEV_GPU_UTIL is a gauge in percent, DCGM_FI_DEV_FB_USED a
//     gauge in MiB; both are in the default counter set.
//
// Within one pod, several series of a metric (one per engine, one per GPU)
// combine with the metric's own rule: queues add up, usage fractions and
// utilization average, memory adds up.
var presets = map[string][]Metric{
	"vllm": {
		{Name: "vllm-num-requests-waiting", Series: "vllm:num_requests_waiting", Type: Gauge, Combine: CombineSum},
		{Name: "vllm-num-requests-running", Series: "vllm:num_requests_running", Type: Gauge, Combine: CombineSum},
		{
			Name: "vllm-kv-cache-usage", Series: "vllm:kv_cache_usage_perc",
			Aliases: []string{"vllm:gpu_cache_usage_perc"}, Type: Gauge, Combine: CombineMean,
		},
	},
	"sglang": {
		{Name: "sglang-num-queue-reqs", Series: "sglang:num_queue_reqs", Type: Gauge, Combine: CombineSum},
		{Name: "sglang-token-usage", Series: "sglang:token_usage", Type: Gauge, Combine: CombineMean},
	},
	"dcgm": {
		{Name: "gpu-utilization", Series: "DCGM_FI_DEV_GPU_UTIL", Type: Gauge, Combine: CombineMean},
		{Name: "gpu-memory-used-mib", Series: "DCGM_FI_DEV_FB_USED", Type: Gauge, Combine: CombineSum},
	},
}

// Presets returns a copy of the named preset's metrics, and whether it
// exists.
func Presets(name string) ([]Metric, bool) {
	ms, ok := presets[name]
	return append([]Metric(nil), ms...), ok
}
