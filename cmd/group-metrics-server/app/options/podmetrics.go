package options

import (
	"fmt"
	"os"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// podMetricsConfig reads and validates --pod-metrics-config: nil without
// the flag, and every problem of the file otherwise, each naming the flag.
func (o *Options) podMetricsConfig() (*promscrape.Config, []error) {
	if o.PodMetricsConfig == "" {
		return nil, nil
	}
	data, err := os.ReadFile(o.PodMetricsConfig)
	if err != nil {
		return nil, []error{fmt.Errorf("--pod-metrics-config: %w", err)}
	}
	cfg, errs := promscrape.Parse(data)
	if len(errs) > 0 {
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = fmt.Errorf("--pod-metrics-config %s: %w", o.PodMetricsConfig, e)
		}
		return nil, out
	}
	return cfg, nil
}

// validatePodMetrics checks the file and how it fits the other flags.
func (o *Options) validatePodMetrics() []error {
	if o.PodMetricsConfig == "" {
		return nil
	}
	cfg, errs := o.podMetricsConfig()
	if !o.EnableCustomMetrics {
		errs = append(errs, fmt.Errorf("--pod-metrics-config needs --enable-custom-metrics: its metrics are served on custom.metrics.k8s.io"))
	}
	// The one scraper runs the pod endpoints with the kubelets, under its
	// timeout.
	if cfg != nil && cfg.Timeout.Duration > o.KubeletRequestTimeout {
		errs = append(errs, fmt.Errorf("--pod-metrics-config %s: timeout %s must be at most --kubelet-request-timeout (%s), which bounds every scrape",
			o.PodMetricsConfig, cfg.Timeout.Duration, o.KubeletRequestTimeout))
	}
	return errs
}
