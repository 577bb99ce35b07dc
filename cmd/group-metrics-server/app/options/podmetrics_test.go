package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestValidatePodMetricsConfig(t *testing.T) {
	good := writeFile(t, "good.yaml", "presets: [vllm, dcgm]\nnodeExporters: [{name: dcgm, selector: app=dcgm, port: 9400, namespaces: [gpu-operator], metrics: [gpu-utilization]}]\n")
	bad := writeFile(t, "bad.yaml", "presets: [vllm, tgi]\ntimeout: 2m\nmetrics:\n- {name: Bad, series: x, type: summary, combine: sum}\n")
	slow := writeFile(t, "slow.yaml", "presets: [sglang]\ntimeout: 20s\n")
	tests := []struct {
		name  string
		set   func(o *Options)
		wants []string // one prefix per expected error, in order
	}{
		{name: "off by default", set: func(*Options) {}},
		{name: "a good file", set: func(o *Options) { o.PodMetricsConfig = good; o.EnableCustomMetrics = true }},
		{name: "every error of a bad file, each naming the flag",
			set: func(o *Options) { o.PodMetricsConfig = bad; o.EnableCustomMetrics = true },
			wants: []string{"--pod-metrics-config " + bad + `: presets[1]: unknown preset "tgi"`,
				"--pod-metrics-config " + bad + `: metrics[3].name: "Bad" is not a valid custom metric name`,
				"--pod-metrics-config " + bad + `: metrics[3].type: "summary" must be gauge, counter, histogram or ratio`,
				"--pod-metrics-config " + bad + `: timeout: 2m0s must be above 0 and at most 1m0s`}},
		{name: "a missing file",
			set:   func(o *Options) { o.PodMetricsConfig = "/nonexistent/pod-metrics.yaml"; o.EnableCustomMetrics = true },
			wants: []string{"--pod-metrics-config: open /nonexistent/pod-metrics.yaml"}},
		{name: "without custom metrics", set: func(o *Options) { o.PodMetricsConfig = good },
			wants: []string{"--pod-metrics-config needs --enable-custom-metrics"}},
		{name: "a timeout past the scraper's",
			set: func(o *Options) {
				o.PodMetricsConfig, o.EnableCustomMetrics, o.KubeletRequestTimeout = slow, true, 10*time.Second
			},
			wants: []string{"--pod-metrics-config " + slow + ": timeout 20s must be at most --kubelet-request-timeout (10s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			tt.set(o)
			checkErrors(t, o.Validate(), tt.wants, strings.HasPrefix)
		})
	}
}

// TestPodMetricsConfigApplied: a good file reaches the server's
// configuration, parsed, with its presets expanded.
func TestPodMetricsConfigApplied(t *testing.T) {
	o := NewOptions()
	o.PodMetricsConfig, o.EnableCustomMetrics = writeFile(t, "c.yaml", "presets: [sglang]\n"), true
	cfg, errs := o.podMetricsConfig()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var names []string
	for _, m := range cfg.Metrics {
		names = append(names, m.Name)
	}
	if diff := cmp.Diff([]string{"sglang-num-queue-reqs", "sglang-token-usage"}, names); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
