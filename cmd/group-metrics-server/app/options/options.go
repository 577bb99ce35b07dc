// Package options holds the command-line flags of group-metrics-server, their
// validation, and their translation into a server.Config.
package options

import (
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics"

	"github.com/group-metrics-server/group-metrics-server/pkg/apiserver"
	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
)

// Options are the flags of group-metrics-server.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	Features       *genericoptions.FeatureOptions
	Logs           *logsapi.LoggingConfiguration
	// ServerRun, Audit and Metrics are the generic options metrics-server
	// takes too (compat.go).
	ServerRun *genericoptions.ServerRunOptions
	Audit     *genericoptions.AuditOptions
	Metrics   *metrics.Options

	Kubeconfig string

	MetricResolution     time.Duration
	MaxConcurrentScrapes int
	MaxConcurrentReads   int
	// PriorityReaders are the identities with read slots of their own
	// (apiserver.ReadLimit.Priority).
	PriorityReaders []string
	NodeSelector    string

	KubeletPort                  int
	KubeletUseNodeStatusPort     bool
	KubeletPreferredAddressTypes []string
	KubeletInsecureTLS           bool
	KubeletCAFile                string
	KubeletClientCertFile        string
	KubeletClientKeyFile         string
	KubeletRequestTimeout        time.Duration
	KubeletMaxResponseBytes      int64
	KubeletEndpoint              string
	// DeprecatedKubeletCompletelyInsecure is accepted and ignored.
	DeprecatedKubeletCompletelyInsecure bool

	Sources              []string
	KraftletNodeSelector string
	UkpdEndpoints        []string
	UkpdTokenFile        string
	UkpdCAFile           string
	UkpdInsecureTLS      bool
	UkpdRelayPort        int
	UkpdRelayCAFile      string
	UkpdRelayServerName  string
	UkpdListRefresh      time.Duration
	UkpdRequiredTags     []string

	DefaultGroupPolicy  string
	EnableCustomMetrics bool
	GroupMetricsSeries  bool
	// PodMetricsConfig is the file of the pod-endpoint source; off when
	// empty.
	PodMetricsConfig string
	// The HPA's readiness rule, as kube-controller-manager's flags set it.
	HPACPUInitializationPeriod time.Duration
	HPAInitialReadinessDelay   time.Duration

	ShowVersion bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
		Features:       genericoptions.NewFeatureOptions(),
		Logs:           logsapi.NewLoggingConfiguration(),

		MetricResolution:     15 * time.Second,
		MaxConcurrentScrapes: 64,
		PriorityReaders:      append([]string(nil), apiserver.DefaultPriorityReaders...),

		KubeletPort:                  10250,
		KubeletPreferredAddressTypes: []string{string(corev1.NodeHostName), string(corev1.NodeInternalDNS), string(corev1.NodeInternalIP), string(corev1.NodeExternalDNS), string(corev1.NodeExternalIP)},
		KubeletRequestTimeout:        10 * time.Second,
		KubeletMaxResponseBytes:      10 << 20,
		KubeletEndpoint:              string(kubelet.EndpointSummary),

		DefaultGroupPolicy:         string(group.PolicyPod),
		HPACPUInitializationPeriod: group.DefaultReadiness.CPUInitializationPeriod,
		HPAInitialReadinessDelay:   group.DefaultReadiness.InitialReadinessDelay,

		Sources:              []string{kubelet.SourceName},
		KraftletNodeSelector: ukpd.DefaultNodeSelector,
		UkpdListRefresh:      ukpd.DefaultListRefresh,
	}
	o.ServerRun, o.Audit, o.Metrics = newGenericOptions()
	o.SecureServing.BindPort = 10250
	// An empty directory means a generated pair stays in memory: the root
	// file system may be read-only.
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = ""
	o.Features.EnableProfiling = false
	// Priority and fairness needs informers on flow-control objects and RBAC
	// to read them; a metrics server has a handful of clients and bounds
	// its own work per request, so it runs without, as metrics-server does.
	o.Features.EnablePriorityAndFairness = false
	return o
}

// Flags returns the flags, grouped for --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	fs := fss.FlagSet("metrics")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster to serve; in-cluster configuration when empty.")
	fs.DurationVar(&o.MetricResolution, "metric-resolution", o.MetricResolution, "Interval between two scrapes of every target. At least 5s.")
	fs.IntVar(&o.MaxConcurrentScrapes, "max-concurrent-scrapes", o.MaxConcurrentScrapes, "Most targets scraped at once.")
	fs.IntVar(&o.MaxConcurrentReads, "max-concurrent-reads", o.MaxConcurrentReads, "Most metrics API requests served at once, so that a burst of reads cannot exhaust memory or starve the scrapes; more wait up to 10s, then get 429 (which clients retry). One identity holds at most half of them. 0 means the number of CPUs the process may use.")
	fs.StringSliceVar(&o.PriorityReaders, "priority-readers", o.PriorityReaders, "User names whose metrics API requests have a slot of their own before they share --max-concurrent-reads, so that no other reader can keep them waiting: the HPA controller's identities by default (its ServiceAccount with --use-service-account-credentials, else kube-controller-manager's user).")
	fs.StringVarP(&o.NodeSelector, "node-selector", "l", o.NodeSelector, "Label selector of the nodes to scrape; all nodes when empty.")

	fs = fss.FlagSet("kubelet client")
	fs.IntVar(&o.KubeletPort, "kubelet-port", o.KubeletPort, "Port of the kubelet's API.")
	fs.BoolVar(&o.KubeletUseNodeStatusPort, "kubelet-use-node-status-port", o.KubeletUseNodeStatusPort, "Use the port each node advertises in its status instead of --kubelet-port.")
	fs.StringSliceVar(&o.KubeletPreferredAddressTypes, "kubelet-preferred-address-types", o.KubeletPreferredAddressTypes, "Node address types to reach a kubelet by, in order of preference.")
	fs.BoolVar(&o.KubeletInsecureTLS, "kubelet-insecure-tls", o.KubeletInsecureTLS, "Do not verify the kubelets' serving certificates. For testing only.")
	fs.StringVar(&o.KubeletCAFile, "kubelet-certificate-authority", o.KubeletCAFile, "CA file to verify kubelet serving certificates with; the cluster CA when empty.")
	fs.StringVar(&o.KubeletClientCertFile, "kubelet-client-certificate", o.KubeletClientCertFile, "Client certificate to present to kubelets instead of the service-account token.")
	fs.StringVar(&o.KubeletClientKeyFile, "kubelet-client-key", o.KubeletClientKeyFile, "Key of --kubelet-client-certificate.")
	fs.DurationVar(&o.KubeletRequestTimeout, "kubelet-request-timeout", o.KubeletRequestTimeout, "Timeout of one scrape of one kubelet. Below --metric-resolution.")
	fs.Int64Var(&o.KubeletMaxResponseBytes, "kubelet-max-response-bytes", o.KubeletMaxResponseBytes, "Largest response accepted from a kubelet.")
	fs.StringVar(&o.KubeletEndpoint, "kubelet-endpoint", o.KubeletEndpoint, "Kubelet endpoint to read: summary (GET /stats/summary; the server needs get nodes/stats) or resource (GET /metrics/resource, as metrics-server reads: sample times to the millisecond rather than the second; a node's metrics.k8s.io/resource-metrics-path annotation names another path, as for metrics-server; the server needs get nodes/metrics). See docs/security.md.")
	fs.BoolVar(&o.DeprecatedKubeletCompletelyInsecure, "deprecated-kubelet-completely-insecure", false, "Accepted for compatibility with metrics-server and ignored, with a warning: kubelets are always reached over TLS.")

	fs = fss.FlagSet("sources")
	fs.StringSliceVar(&o.Sources, "sources", o.Sources, "Sources to collect from, of kubelet and ukpd. When two report the same pod, the one listed first wins.")
	fs.StringVar(&o.KraftletNodeSelector, "kraftlet-node-selector", o.KraftletNodeSelector, "Label selector of kraftlet nodes: the kubelet source skips them, and ukpd endpoints without their own nodes own them.")
	fs.StringArrayVar(&o.UkpdEndpoints, "ukpd-endpoint", o.UkpdEndpoints, "A ukpd endpoint, repeatable: URL[;nodes=a,b | ;node-selector=SELECTOR][;metrics-format=json|text][;token-file=F][;ca-file=F]. See docs/ukpd.md.")
	fs.StringVar(&o.UkpdTokenFile, "ukpd-token-file", o.UkpdTokenFile, "File with the bearer token for ukpd endpoints that set none; re-read when it changes.")
	fs.StringVar(&o.UkpdCAFile, "ukpd-certificate-authority", o.UkpdCAFile, "CA file to verify ukpd endpoints with, for endpoints that set none; the system roots when empty.")
	fs.BoolVar(&o.UkpdInsecureTLS, "ukpd-insecure-tls", o.UkpdInsecureTLS, "Do not verify ukpd serving certificates. For testing only.")
	fs.IntVar(&o.UkpdRelayPort, "ukpd-relay-port", o.UkpdRelayPort, "Port of the ukpd relays (group-metrics-server ukpd-relay) on the hosts that run kraftlet with a ukpd of their own: one target per kraftlet node no --ukpd-endpoint owns, at the node's address (--kubelet-preferred-address-types), sent the server's own credential. 0 turns relays off. See docs/ukpd.md.")
	fs.StringVar(&o.UkpdRelayCAFile, "ukpd-relay-certificate-authority", o.UkpdRelayCAFile, "CA file to verify the ukpd relays' serving certificates with; the cluster's CA when empty.")
	fs.StringVar(&o.UkpdRelayServerName, "ukpd-relay-server-name", o.UkpdRelayServerName, "Name the relays' serving certificates are verified for, when they share one; the node's address when empty.")
	fs.DurationVar(&o.UkpdListRefresh, "ukpd-list-refresh", o.UkpdListRefresh, "Longest time an instance list is reused; an unknown instance in the metrics refetches it sooner.")
	fs.StringArrayVar(&o.UkpdRequiredTags, "ukpd-required-tag", o.UkpdRequiredTags, "A tag key=value that ukpd instances must carry to be attributed, repeatable: tells this cluster's instances from other clusters' in the same account. See docs/ukpd.md.")

	fs = fss.FlagSet("leaderworkerset groups")
	fs.StringVar(&o.DefaultGroupPolicy, "default-group-policy", o.DefaultGroupPolicy, "What a LeaderWorkerSet leader reports when its pod has no "+group.AnnotationPolicy+" annotation: pod (its own usage), group (the group's utilization times its own request) or group-max (the highest member utilization times its own request).")

	fs.DurationVar(&o.HPACPUInitializationPeriod, "horizontal-pod-autoscaler-cpu-initialization-period", o.HPACPUInitializationPeriod, "As kube-controller-manager's flag of this name, and set it to the same value: for this long after a group member starts, its CPU sample counts only while it is Ready and the sample began after it became Ready. Until every member's counts, a group-policy leader reports no value.")
	fs.DurationVar(&o.HPAInitialReadinessDelay, "horizontal-pod-autoscaler-initial-readiness-delay", o.HPAInitialReadinessDelay, "As kube-controller-manager's flag of this name, and set it to the same value: after the CPU initialization period, a group member that is not Ready and whose readiness last changed within this long of its start (never Ready) keeps its group-policy leader from reporting.")
	fs.BoolVar(&o.GroupMetricsSeries, "group-metrics-series", o.GroupMetricsSeries, "Serve every LeaderWorkerSet group's CPU and memory usage, utilization and member counts as series on /metrics (group_metrics_server_lws_group_*, six per group), and with --pod-metrics-config each group's value of every pod-endpoint metric (group_metrics_server_lws_group_endpoint_value, one per group and metric), for Prometheus, KEDA or prometheus-adapter.")
	fs.BoolVar(&o.EnableCustomMetrics, "enable-custom-metrics", o.EnableCustomMetrics, "Serve LeaderWorkerSet group metrics on custom.metrics.k8s.io (a cluster has one custom metrics APIService: enable only when this server owns it).")
	fs.StringVar(&o.PodMetricsConfig, "pod-metrics-config", o.PodMetricsConfig, "File (YAML or JSON) of the pod-endpoint source: which pods' Prometheus endpoints and node exporters to scrape, and which of their series to serve on custom.metrics.k8s.io, per pod and per LeaderWorkerSet group (needs --enable-custom-metrics). Read and validated at start; off when empty. See docs/inference-autoscaling.md.")

	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.Features.AddFlags(fss.FlagSet("features"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	o.addGenericFlags(&fss)
	fss.FlagSet("generic").BoolVar(&o.ShowVersion, "version", false, "Print the version and exit.")
	return fss
}

// Validate returns every problem with the flags, not just the first.
func (o *Options) Validate() []error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	errs = append(errs, o.Features.Validate()...)
	errs = append(errs, o.validateGeneric()...)

	if o.MetricResolution < 5*time.Second {
		errs = append(errs, fmt.Errorf("--metric-resolution must be at least 5s, got %s", o.MetricResolution))
	}
	if o.KubeletRequestTimeout <= 0 || o.KubeletRequestTimeout >= o.MetricResolution {
		errs = append(errs, fmt.Errorf("--kubelet-request-timeout must be positive and below --metric-resolution (%s), got %s", o.MetricResolution, o.KubeletRequestTimeout))
	}
	if o.MaxConcurrentScrapes < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-scrapes must be at least 1, got %d", o.MaxConcurrentScrapes))
	}
	if o.MaxConcurrentReads < 0 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reads must be 0 (automatic) or more, got %d", o.MaxConcurrentReads))
	}
	if !slices.Contains(kubelet.Endpoints, kubelet.Endpoint(o.KubeletEndpoint)) {
		errs = append(errs, fmt.Errorf("--kubelet-endpoint must be one of %q, got %q", kubelet.Endpoints, o.KubeletEndpoint))
	}
	if o.KubeletMaxResponseBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("--kubelet-max-response-bytes must be at least 1024, got %d", o.KubeletMaxResponseBytes))
	}
	if o.KubeletPort < 1 || o.KubeletPort > 65535 {
		errs = append(errs, fmt.Errorf("--kubelet-port must be between 1 and 65535, got %d", o.KubeletPort))
	}
	if _, err := o.addressTypes(); err != nil {
		errs = append(errs, err)
	}
	if o.KubeletInsecureTLS && o.KubeletCAFile != "" {
		errs = append(errs, fmt.Errorf("--kubelet-insecure-tls and --kubelet-certificate-authority exclude each other"))
	}
	if (o.KubeletClientCertFile == "") != (o.KubeletClientKeyFile == "") {
		errs = append(errs, fmt.Errorf("--kubelet-client-certificate and --kubelet-client-key go together"))
	}
	if _, err := labels.Parse(o.NodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("--node-selector: %w", err))
	}
	errs = append(errs, o.validateSources()...)
	errs = append(errs, o.validatePodMetrics()...)
	if _, err := group.ParsePolicy(o.DefaultGroupPolicy); err != nil {
		errs = append(errs, fmt.Errorf("--default-group-policy: %w", err))
	}
	if o.HPACPUInitializationPeriod < 0 {
		errs = append(errs, fmt.Errorf("--horizontal-pod-autoscaler-cpu-initialization-period must not be negative, got %s", o.HPACPUInitializationPeriod))
	}
	if o.HPAInitialReadinessDelay < 0 {
		errs = append(errs, fmt.Errorf("--horizontal-pod-autoscaler-initial-readiness-delay must not be negative, got %s", o.HPAInitialReadinessDelay))
	}
	return errs
}

func (o *Options) validateSources() []error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range o.Sources {
		switch {
		case s != kubelet.SourceName && s != ukpd.SourceName:
			errs = append(errs, fmt.Errorf("--sources: unknown source %q: want %s or %s", s, kubelet.SourceName, ukpd.SourceName))
		case seen[s]:
			errs = append(errs, fmt.Errorf("--sources: %q named twice", s))
		}
		seen[s] = true
	}
	if len(o.Sources) == 0 {
		errs = append(errs, fmt.Errorf("--sources must name at least one source"))
	}
	if _, err := labels.Parse(o.KraftletNodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("--kraftlet-node-selector: %w", err))
	}
	eps, epErrs := o.ukpdEndpoints()
	errs = append(errs, epErrs...)
	switch {
	case seen[ukpd.SourceName] && len(o.UkpdEndpoints) == 0 && o.UkpdRelayPort == 0:
		errs = append(errs, fmt.Errorf("--sources=ukpd needs at least one --ukpd-endpoint, or --ukpd-relay-port"))
	case !seen[ukpd.SourceName] && (len(o.UkpdEndpoints) > 0 || o.UkpdRelayPort != 0):
		errs = append(errs, fmt.Errorf("--ukpd-endpoint or --ukpd-relay-port is set but --sources does not name ukpd"))
	}
	if o.UkpdRelayPort < 0 || o.UkpdRelayPort > 65535 {
		errs = append(errs, fmt.Errorf("--ukpd-relay-port must be 0 (off) or a port, got %d", o.UkpdRelayPort))
	}
	if len(epErrs) == 0 {
		errs = append(errs, ukpd.ValidateEndpoints(eps)...)
	}
	for _, tag := range o.UkpdRequiredTags {
		if _, err := ukpd.ParseRequiredTag(tag); err != nil {
			errs = append(errs, fmt.Errorf("--ukpd-required-tag: %w", err))
		}
	}
	if o.UkpdListRefresh <= 0 {
		errs = append(errs, fmt.Errorf("--ukpd-list-refresh must be positive, got %s", o.UkpdListRefresh))
	}
	return errs
}

func (o *Options) ukpdEndpoints() ([]ukpd.EndpointConfig, []error) {
	var (
		eps  []ukpd.EndpointConfig
		errs []error
	)
	for _, s := range o.UkpdEndpoints {
		ep, err := ukpd.ParseEndpoint(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--ukpd-endpoint: %w", err))
			continue
		}
		eps = append(eps, ep)
	}
	return eps, errs
}

func (o *Options) addressTypes() ([]corev1.NodeAddressType, error) {
	known := map[corev1.NodeAddressType]bool{
		corev1.NodeHostName: true, corev1.NodeInternalDNS: true, corev1.NodeInternalIP: true,
		corev1.NodeExternalDNS: true, corev1.NodeExternalIP: true,
	}
	if len(o.KubeletPreferredAddressTypes) == 0 {
		return nil, fmt.Errorf("--kubelet-preferred-address-types must name at least one type")
	}
	out := make([]corev1.NodeAddressType, 0, len(o.KubeletPreferredAddressTypes))
	for _, t := range o.KubeletPreferredAddressTypes {
		at := corev1.NodeAddressType(t)
		if !known[at] {
			return nil, fmt.Errorf("--kubelet-preferred-address-types: unknown type %q", t)
		}
		out = append(out, at)
	}
	return out, nil
}

// loopbackIPs are the addresses a generated in-memory certificate covers.
var loopbackIPs = []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
