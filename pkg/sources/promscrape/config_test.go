package promscrape

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		name, file  string
		wantMetrics []string
		wantTimeout time.Duration
		wantMax     int64
	}{
		{name: "presets expand in order, defaults filled", file: "presets: [vllm, dcgm]\n", wantTimeout: 5 * time.Second, wantMax: 1 << 20,
			wantMetrics: []string{"vllm-num-requests-waiting", "vllm-num-requests-running", "vllm-kv-cache-usage", "gpu-utilization", "gpu-memory-used-mib"}},
		{name: "own metric with matchers, JSON accepted",
			file: `{"metrics":[{"name":"queue-a","series":"vllm:num_requests_waiting","type":"gauge","combine":"max",
				"matchers":[{"label":"model_name","op":"=~","value":"llama.*"}]}],"timeout":"2s","maxBytes":1000}`,
			wantMetrics: []string{"queue-a"}, wantTimeout: 2 * time.Second, wantMax: 1000},
		{name: "sglang preset and selector", file: "presets: [sglang]\npods:\n  selector: app=sglang\n  port: 30000\n",
			wantMetrics: []string{"sglang-num-queue-reqs", "sglang-token-usage"}, wantTimeout: 5 * time.Second, wantMax: 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.file)
			var names []string
			for _, m := range c.Metrics {
				names = append(names, m.Name)
			}
			checkDiff(t, "metrics", tt.wantMetrics, names)
			if c.Timeout.Duration != tt.wantTimeout || c.MaxBytes != tt.wantMax {
				t.Errorf("timeout, maxBytes = %s, %d; want %s, %d", c.Timeout.Duration, c.MaxBytes, tt.wantTimeout, tt.wantMax)
			}
		})
	}
}

// TestParseReportsEveryError checks that one bad file yields every problem
// in it, not only the first.
func TestParseReportsEveryError(t *testing.T) {
	file := `
presets: [vllm, tgi]
timeout: 2m
maxBytes: -1
pods: {selector: "app in (a", port: 70000}
metrics:
- name: Bad_Name
  series: "9lives"
  aliases: ["ok:name", "bad name"]
  type: summary
  combine: median
  members: followers
  matchers: [{label: "model-name", op: "=", value: x}, {label: model, op: "=~", value: "("}, {label: model, op: "~", value: x}]
- {name: vllm-num-requests-waiting, series: "vllm:num_requests_waiting", type: gauge, combine: sum, min: 2, max: 1}
- {name: ttft, series: "vllm:time_to_first_token_seconds", type: histogram, combine: sum, min: 0, quantile: 1.5}
- {name: running, series: "vllm:num_requests_running", type: gauge, combine: sum, quantile: 0.5, denominator: x}
- {name: preemptions-per-request, series: "vllm:num_preemptions_total", type: ratio, combine: sum, quantile: 0.5, idle: never}
- {name: queue, series: "vllm:num_requests_waiting", type: gauge, combine: sum, idle: zero}
limits: {labelsPerSeries: 1000, seriesPerTarget: -1}
nodeExporters:
- name: dcgm
  selector: ""
  port: 0
  path: metrics
  scheme: ftp
  podLabel: "bad-label"
  namespaces: ["Bad_NS"]
  serviceAccounts: ["bad sa"]
  metrics: [gpu-utilization]
- {name: dcgm, selector: app=dcgm, port: 9400}
endpointPickers:
- {name: dcgm, selector: app=epp, port: 9090, namespaces: [gateway], metrics: [running], inferencePool: Pool_1, tokenFile: token}
`
	_, errs := Parse([]byte(file))
	got, want := errStrings(errs), []string{
		`presets[1]: unknown preset "tgi"`,
		`metrics[3].name: "Bad_Name" is not a valid custom metric name`,
		`metrics[3].series: "9lives" is not a Prometheus metric name`,
		`metrics[3].aliases[1]: "bad name" is not a Prometheus metric name`,
		`metrics[3].type: "summary" must be gauge, counter, histogram or ratio`,
		`metrics[3].members: unknown member scope "followers": want all, leader or workers`,
		`metrics[3].combine: "median" must be sum, mean or max`,
		`metrics[3].matchers[0]: label "model-name" is not a Prometheus label name`,
		`metrics[3].matchers[1]: value "("`,
		`metrics[3].matchers[2]: op "~" must be one of`,
		`metrics[4]: min 2 is above max 1`,
		`metrics[4].name: "vllm-num-requests-waiting" is already served by metrics[0]`,
		`metrics[5].combine: a histogram takes none`,
		`metrics[5]: a histogram takes no min or max`,
		`metrics[5].quantile: 1.5 is not within [0, 1]`,
		`metrics[6].quantile: only a histogram has quantiles`,
		`metrics[6].denominator: only a ratio has a denominator`,
		`metrics[7].combine: a ratio takes none`,
		`metrics[7].quantile: only a histogram has quantiles`,
		`metrics[7].idle: "never" must be zero or none`,
		`metrics[7].denominator: "" is not a Prometheus metric name`,
		`metrics[8].idle: only a histogram or a ratio has an idle value`,
		`timeout: 2m0s must be above 0 and at most 1m0s`,
		`maxBytes: -1 must be above 0`,
		`limits.labelsPerSeries: 1000 must be above 0 and at most 128`,
		`limits.seriesPerTarget: -1 must be above 0 and at most 1000000`,
		`pods.selector:`,
		`pods.port: 70000 is not a port`,
		`nodeExporters[0].selector: required`,
		`nodeExporters[0].port: 0 is not a port`,
		`nodeExporters[0].path: "metrics" must begin with /`,
		`nodeExporters[0].scheme: "ftp" must be http or https`,
		`nodeExporters[0].namespaces[0]: "Bad_NS" is not a namespace name`,
		`nodeExporters[0].serviceAccounts[0]: "bad sa" is not a service account name`,
		`nodeExporters[0].metrics[0]: "gpu-utilization" is not a configured metric`,
		`nodeExporters[0]: attribution label "bad-label" is not a Prometheus label name`,
		`nodeExporters[1].namespaces: required`,
		`nodeExporters[1].metrics: required`,
		`nodeExporters[1].name: "dcgm" is used by nodeExporters[0] too`,
		`endpointPickers[0].inferencePool: "Pool_1" is not an object name`,
		`endpointPickers[0].tokenFile: "token" must be an absolute path`,
		`endpointPickers[0].name: "dcgm" is used by nodeExporters[1] too`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

// TestParseReportsUnknownKeysWithTheRest: a misspelt key is reported beside
// the file's other problems, not instead of them, and keys match
// case-sensitively (encoding/json would take "Presets" for "presets").
func TestParseReportsUnknownKeysWithTheRest(t *testing.T) {
	file := `
Presets: [vllm]
presets: [tgi]
intervall: 5s
metrics:
- {name: q, series: "vllm:num_requests_waiting", type: gauge, combine: sum, matcher: []}
nodeExporters:
- {name: dcgm, selector: app=dcgm, port: 0, namespaces: [gpu], metrics: [q]}
`
	_, errs := Parse([]byte(file))
	got, want := errStrings(errs), []string{
		`read configuration: unknown field "Presets"`,
		`read configuration: unknown field "intervall"`,
		`read configuration: unknown field "metrics[0].matcher"`,
		`presets[0]: unknown preset "tgi"`,
		`nodeExporters[0].port: 0 is not a port`,
	}
	checkDiff(t, "errors", want, got, cmp.Comparer(func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }))
}

func TestParseRejectsUnreadableFiles(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"unknown field", "presets: [vllm]\nmetric: []\n", `unknown field "metric"`},
		{"bad duration", "presets: [vllm]\ntimeout: 5\n", "duration must be a string"},
		{"not yaml", "presets: [vllm\n", "read configuration"},
		{"empty", "", "no metric configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := Parse([]byte(tt.file))
			if len(errs) == 0 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("Parse errors = %v, want one containing %q", errs, tt.want)
			}
		})
	}
}

// TestPresetsAreValidAndDistinct: every preset validates, no two engines'
// presets serve one name (a data-parallel preset is its engine's metrics in
// another scope, and a configuration names one of the two), and each
// preset is what its sources say (presets.go).
func TestPresetsAreValidAndDistinct(t *testing.T) {
	seen, got := map[string]string{}, map[string]Metric{}
	for name := range presets {
		ms, _ := Presets(name)
		c := Config{Metrics: ms, Timeout: Duration{time.Second}, MaxBytes: 1}
		if errs := c.Validate(); len(errs) > 0 {
			t.Errorf("preset %s: %v", name, errs)
		}
		engine, _, _ := strings.Cut(name, "-data-parallel")
		for _, m := range ms {
			if other, dup := seen[m.Name]; dup && other != engine {
				t.Errorf("metric %s in presets %s and %s", m.Name, other, name)
			}
			seen[m.Name] = engine
			key := name + "/" + m.Name
			m.Name = ""
			got[key] = m
		}
	}
	vllm := map[string]Metric{
		"vllm-num-requests-waiting": {Series: "vllm:num_requests_waiting", Type: Gauge, Combine: CombineSum, Min: f(0)},
		"vllm-num-requests-running": {Series: "vllm:num_requests_running", Type: Gauge, Combine: CombineSum, Min: f(0)},
		"vllm-kv-cache-usage":       {Series: "vllm:kv_cache_usage_perc", Aliases: []string{"vllm:gpu_cache_usage_perc"}, Type: Gauge, Combine: CombineMean, Min: f(0), Max: f(1)},
	}
	vllmLatency := map[string]Metric{
		"vllm-time-to-first-token-p90":   {Series: "vllm:time_to_first_token_seconds", Type: Histogram, Quantile: f(0.9)},
		"vllm-time-per-output-token-p90": {Series: "vllm:time_per_output_token_seconds", Type: Histogram, Quantile: f(0.9)},
		"vllm-request-queue-time-mean":   {Series: "vllm:request_queue_time_seconds", Type: Histogram},
	}
	sglang := map[string]Metric{
		"sglang-num-queue-reqs": {Series: "sglang:num_queue_reqs", Type: Gauge, Combine: CombineSum, Min: f(0)},
		"sglang-token-usage":    {Series: "sglang:token_usage", Type: Gauge, Combine: CombineMean, Min: f(0), Max: f(1)},
	}
	want := map[string]Metric{
		"dcgm/gpu-utilization":                                {Series: "DCGM_FI_DEV_GPU_UTIL", Type: Gauge, Combine: CombineMean, Members: group.ScopeAll, Min: f(0), Max: f(100)},
		"dcgm/gpu-memory-used-mib":                            {Series: "DCGM_FI_DEV_FB_USED", Type: Gauge, Combine: CombineSum, Members: group.ScopeAll, Min: f(0)},
		"inference-gateway/gateway-queue-size":                {Series: "inference_extension_flow_control_queue_size", Type: Gauge, Combine: CombineSum, Min: f(0), Members: group.ScopeAll},
		"inference-gateway/gateway-pool-average-queue-size":   {Series: "inference_pool_average_queue_size", Type: Gauge, Combine: CombineMax, Min: f(0), Members: group.ScopeAll},
		"inference-gateway/gateway-time-to-first-token-p90":   {Series: "inference_objective_request_ttft_seconds", Type: Histogram, Quantile: f(0.9), Members: group.ScopeAll},
		"inference-gateway/gateway-time-per-output-token-p90": {Series: "inference_objective_request_tpot_seconds", Type: Histogram, Quantile: f(0.9), Members: group.ScopeAll},
	}
	for preset, scope := range map[string]group.Scope{
		"vllm": group.ScopeLeader, "vllm-data-parallel": group.ScopeAll, "vllm-latency": group.ScopeLeader, "vllm-latency-data-parallel": group.ScopeAll,
		"sglang": group.ScopeLeader, "sglang-data-parallel": group.ScopeAll,
	} {
		ms := vllm
		switch {
		case strings.HasPrefix(preset, "sglang"):
			ms = sglang
		case strings.HasPrefix(preset, "vllm-latency"):
			ms = vllmLatency
		}
		for name, m := range ms {
			m.Members = scope
			want[preset+"/"+name] = m
		}
	}
	checkDiff(t, "presets", want, got, cmpopts.IgnoreUnexported(Matcher{}))
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("presets: [vllm]\n"))
	f.Add([]byte("metrics:\n- {name: a, series: b, type: counter, combine: sum, matchers: [{label: l, op: '=~', value: 'x|y'}]}\n"))
	f.Add([]byte("presets: [dcgm]\nnodeExporters:\n- {name: dcgm, selector: app=dcgm, port: 9400, namespaces: [gpu], metrics: [gpu-utilization]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, errs := Parse(data)
		if len(errs) > 0 {
			if c != nil {
				t.Fatal("Parse returned a config with errors")
			}
			return
		}
		if len(c.Metrics) == 0 || c.Timeout.Duration <= 0 || c.MaxBytes <= 0 {
			t.Fatalf("accepted config is incomplete: %+v", c)
		}
		if errs := c.Validate(); len(errs) > 0 {
			t.Fatalf("accepted config fails Validate: %v", errs)
		}
	})
}

// TestShippedConfig: the file manifests/components/pod-metrics ships (and
// the e2e suite runs) parses without an error.
func TestShippedConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", "components", "pod-metrics", "pod-metrics.yaml"))
	must(t, err)
	if cfg := mustParse(t, string(data)); len(cfg.Metrics) != 7 || len(cfg.NodeExporters) != 1 {
		t.Errorf("%d metrics and %d exporters, want the 7 of the three presets and DCGM's exporter", len(cfg.Metrics), len(cfg.NodeExporters))
	}
}

func errStrings(errs []error) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// f is a bound, as a Metric holds it.
func f(v float64) *float64 { return &v }
