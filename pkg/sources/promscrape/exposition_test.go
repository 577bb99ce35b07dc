package promscrape

import (
	"fmt"
	"math/rand"
	"strings"
)

// vllmText renders a vLLM-style exposition: the scheduler gauges per
// engine, the deprecated cache gauge next to the current one, and counters
// and histograms the allow-list does not name.
func vllmText(waiting, running [2]float64, kv float64) string {
	var b strings.Builder
	b.WriteString("# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n")
	for e := range 2 {
		fmt.Fprintf(&b, "vllm:num_requests_running{engine=\"%d\",model_name=\"m\"} %g\n", e, running[e])
	}
	b.WriteString("# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\n")
	for e := range 2 {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{engine=\"%d\",model_name=\"m\"} %g\n", e, waiting[e])
	}
	fmt.Fprintf(&b, "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} %g\n", kv)
	fmt.Fprintf(&b, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} %g\n", kv)
	b.WriteString("# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 1234\n")
	b.WriteString("# TYPE vllm:e2e_request_latency_seconds histogram\n")
	b.WriteString("vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"m\"} 1\n")
	b.WriteString("vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 2\n")
	b.WriteString("vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"m\"} 0.9\n")
	b.WriteString("vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"m\"} 2\n")
	return b.String()
}

// dcgmGPU is one GPU row of a DCGM-style exposition; pod "" is a GPU no
// pod holds.
type dcgmGPU struct {
	gpu                       int
	namespace, pod, container string
	util, fbUsed              float64
}

func dcgmText(node string, gpus []dcgmGPU) string {
	var b strings.Builder
	row := func(name string, g dcgmGPU, v float64) {
		fmt.Fprintf(&b, "%s{gpu=\"%d\",UUID=\"GPU-%d\",device=\"nvidia%d\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"%s\"", name, g.gpu, g.gpu, g.gpu, node)
		if g.pod != "" {
			fmt.Fprintf(&b, ",container=\"%s\",namespace=\"%s\",pod=\"%s\"", g.container, g.namespace, g.pod)
		}
		fmt.Fprintf(&b, "} %g\n", v)
	}
	for _, f := range []struct {
		header, name string
		value        func(dcgmGPU) float64
	}{
		{"# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n", "DCGM_FI_DEV_SM_CLOCK", func(dcgmGPU) float64 { return 1980 }},
		{"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n", "DCGM_FI_DEV_GPU_UTIL", func(g dcgmGPU) float64 { return g.util }},
		{"# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n", "DCGM_FI_DEV_FB_USED", func(g dcgmGPU) float64 { return g.fbUsed }},
		{"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", func(dcgmGPU) float64 { return 123456789 }},
	} {
		b.WriteString(f.header)
		for _, g := range gpus {
			row(f.name, g, f.value(g))
		}
	}
	return b.String()
}

// benchText renders one target of the benchmark: allowed allow-listed
// series (names bench_allowed_<i>) mixed at random into about other series
// of other families, as an engine's /metrics mixes its gauges into the
// Python runtime's and its histograms.
func benchText(rng *rand.Rand, allowed, other int) string {
	type fam struct {
		name  string
		lines []string
	}
	var fams []fam
	for i := range allowed {
		name := fmt.Sprintf("bench_allowed_%d", i)
		fams = append(fams, fam{name, []string{fmt.Sprintf("%s{engine=\"0\",model_name=\"m\"} %d", name, rng.Intn(100))}})
	}
	for i := 0; i < other; i += 10 {
		name := fmt.Sprintf("bench_other_seconds_%d", i)
		f := fam{name: name}
		for le := range 10 {
			f.lines = append(f.lines, fmt.Sprintf("%s{engine=\"0\",le=\"%d\",model_name=\"m\"} %d", name, le, rng.Intn(1000)))
		}
		fams = append(fams, f)
	}
	rng.Shuffle(len(fams), func(i, j int) { fams[i], fams[j] = fams[j], fams[i] })
	var b strings.Builder
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s Some help text for the family.\n# TYPE %s gauge\n", f.name, f.name)
		for _, l := range f.lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func benchConfig(allowed int) *Config {
	c := &Config{Timeout: Duration{defaultTimeout}, MaxBytes: defaultMaxBytes}
	for i := range allowed {
		c.Metrics = append(c.Metrics, Metric{
			Name: fmt.Sprintf("allowed-%d", i), Series: fmt.Sprintf("bench_allowed_%d", i), Type: Gauge, Combine: CombineSum,
		})
	}
	if errs := c.Validate(); len(errs) > 0 {
		panic(fmt.Sprint(errs))
	}
	return c
}
