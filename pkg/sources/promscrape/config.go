package promscrape

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// Type says how a source series is read.
type Type string

const (
	// Gauge values are served as they are.
	Gauge Type = "gauge"
	// Counter values are cumulative; the served value is their per-second
	// rate between the last two scrapes.
	Counter Type = "counter"
	// Histogram is a classic histogram (its _bucket, _sum and _count
	// series, each a counter); the served value is the mean, or the
	// Quantile, of what it observed between the last two scrapes,
	// estimated as Prometheus's histogram_quantile does (group.Quantile).
	Histogram Type = "histogram"
	// Ratio is the rate of one counter (Series) over the rate of another
	// (Denominator), both over the last two scrapes: errors per request,
	// preemptions per request. Several series, members and groups pool as
	// a ratio of sums, as a histogram's mean pools its _sum and _count.
	Ratio Type = "ratio"
)

// Idle is what a histogram or a ratio serves over a window in which it
// observed nothing.
type Idle string

const (
	// IdleZero serves 0: no request, no latency. The HPA scales down on
	// none of its metrics while one has no value, so a latency absent
	// while idle would hold an idle workload at its replicas.
	IdleZero Idle = "zero"
	// IdleNone serves no value, as Prometheus's histogram_quantile gives
	// none.
	IdleNone Idle = "none"
)

// Combine says how several values become one: the series of one pod (two
// engines, two GPUs), then the members of one group. It is the group
// rule's vocabulary (group.Combine); a metric takes sum, mean or max.
type Combine = group.Combine

const (
	CombineSum  = group.CombineSum
	CombineMean = group.CombineMean
	CombineMax  = group.CombineMax
)

// MatchOp is the operator of a label matcher, as in PromQL.
type MatchOp string

const (
	MatchEqual     MatchOp = "="
	MatchNotEqual  MatchOp = "!="
	MatchRegexp    MatchOp = "=~"
	MatchNotRegexp MatchOp = "!~"
)

// Matcher filters the series of a metric by one label. A label the series
// does not carry has the value "". Regular expressions are anchored at both
// ends, as in PromQL.
type Matcher struct {
	Label string  `json:"label"`
	Op    MatchOp `json:"op"`
	Value string  `json:"value"`

	re *regexp.Regexp
}

// Metric is one entry of the configuration: a source series and the name
// under which it is served.
type Metric struct {
	// Name is the name served on custom.metrics.k8s.io.
	Name string `json:"name"`
	// Series is the sample name in the exposition, e.g.
	// "vllm:num_requests_waiting".
	Series string `json:"series"`
	// Aliases are older names of the same series, read only from a target
	// that exposes no sample of Series.
	Aliases []string `json:"aliases,omitempty"`
	// Matchers keep only the series whose labels match all of them.
	Matchers []Matcher `json:"matchers,omitempty"`
	// Type is gauge, counter, histogram or ratio.
	Type Type `json:"type"`
	// Denominator, for a ratio, is the counter whose rate divides Series's
	// (the exposed sample name, with its _total suffix).
	Denominator string `json:"denominator,omitempty"`
	// Idle, for a histogram or a ratio, is the value over a window that
	// observed nothing (no request): IdleZero (the default) or IdleNone.
	Idle Idle `json:"idle,omitempty"`
	// Combine is how the series of one pod, and then the members of a
	// group, become one value. A histogram takes none: the buckets, _sum
	// and _count of every series and member it reads are added up first,
	// as sum by (le) does in PromQL, and the estimate made from them.
	Combine Combine `json:"combine,omitempty"`
	// Quantile, for a histogram, is the quantile served (0 to 1, as
	// histogram_quantile takes it); without it, the mean.
	Quantile *float64 `json:"quantile,omitempty"`
	// Members is which members of a LeaderWorkerSet group the group's
	// value reads: leader, workers or all (the default). A member out of
	// scope is neither read nor missing: with "leader", a group whose
	// workers serve no metrics (a multi-node engine) has the leader's
	// value.
	Members group.Scope `json:"members,omitempty"`
	// Min and Max, when set, bound a sample's exposed value (a counter's
	// before its rate): a sample outside them is dropped and counted
	// (out_of_range), never clamped into range.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
}

// PodTargets says which pods' own endpoints are scraped.
type PodTargets struct {
	// Selector, when set, selects pods to scrape whether or not they carry
	// the scrape annotation; Port (and Path, Scheme) then give the endpoint
	// unless the pod's annotations say otherwise.
	Selector string `json:"selector,omitempty"`
	// Port is the default port for pods matched by Selector.
	Port int `json:"port,omitempty"`
	// PrometheusAnnotations also honours the conventional prometheus.io/*
	// annotations (see targets.go for why this is off by default).
	PrometheusAnnotations bool `json:"prometheusAnnotations,omitempty"`
	// AllowHostNetwork lets a hostNetwork pod be a target. Off by default:
	// such a pod's IP is its node's, so the port it names is the node's,
	// served by whatever listens there, not by the pod.
	AllowHostNetwork bool `json:"allowHostNetwork,omitempty"`

	selector labels.Selector
}

// TrustedTarget is what the targets whose series speak for other objects
// than their own pod (node exporters, endpoint pickers) have in common:
// their pods are named by the operator, by selector, namespaces and service
// accounts, and may supply only the metrics listed.
type TrustedTarget struct {
	// Name names the target in logs and self-metrics: "dcgm".
	Name string `json:"name"`
	// Selector selects the target's own pods.
	Selector string `json:"selector"`
	Port     int    `json:"port"`
	Path     string `json:"path,omitempty"`
	Scheme   string `json:"scheme,omitempty"`
	// Namespaces are the only namespaces whose selected pods are taken;
	// required. A pod the selector matches elsewhere is refused: any
	// tenant can label a pod, and these targets' series speak for others.
	Namespaces []string `json:"namespaces"`
	// ServiceAccounts, when set, are the only service accounts the pods
	// may run as.
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
	// Metrics are the served names (Config.Metrics[].name) the target may
	// supply; required. Its other families are not read.
	Metrics []string `json:"metrics"`

	selector labels.Selector
	// metrics holds the indexes into Config.Metrics of Metrics.
	metrics map[int]bool
}

// NodeExporter is a node-level exporter (DCGM exporter), one pod a node,
// whose series name the pod and container they belong to by labels.
type NodeExporter struct {
	TrustedTarget
	// NamespaceLabel, PodLabel and ContainerLabel are the labels that
	// attribute a series; "namespace", "pod" and "container" by default,
	// the names NVIDIA/dcgm-exporter gives them
	// (internal/pkg/transformation/const.go, which also names the older
	// pod_namespace, pod_name and container_name).
	NamespaceLabel string `json:"namespaceLabel,omitempty"`
	PodLabel       string `json:"podLabel,omitempty"`
	ContainerLabel string `json:"containerLabel,omitempty"`
}

// EndpointPicker is an inference gateway's endpoint picker (the
// gateway-api-inference-extension's EPP), whose series speak for the
// InferencePool it serves: every series its pods give is credited to that
// pool, in the picker pod's own namespace, and served on the pool object.
// Its metrics are there while no model server runs, so they are the demand
// that brings a group back from zero.
type EndpointPicker struct {
	TrustedTarget
	// InferencePool is the name of the pool the picker serves (the EPP's
	// --pool-name); required.
	InferencePool string `json:"inferencePool"`
	// TokenFile, when set, is a file holding a bearer token sent to this
	// picker's pods, and to nothing else: a projected ServiceAccount token
	// of the server's own, re-read at every scrape as the kubelet rotates
	// it. The EPP guards /metrics with a TokenReview and a
	// SubjectAccessReview (get on the non-resource URL /metrics) when
	// --metrics-endpoint-auth is on, as it is by default.
	TokenFile string `json:"tokenFile,omitempty"`
}

// Limits bound what one target may hand the server; a target past one of
// them fails (too_large) and loses nothing of the others.
type Limits struct {
	// LabelsPerSeries caps the labels of one series line, counted before
	// the line is parsed; 64 when zero.
	LabelsPerSeries int `json:"labelsPerSeries,omitempty"`
	// LabelBytesPerSeries caps the bytes between a series line's braces;
	// 2048 when zero.
	LabelBytesPerSeries int `json:"labelBytesPerSeries,omitempty"`
	// SeriesPerTarget caps the allow-listed series lines of one target;
	// 10,000 when zero.
	SeriesPerTarget int `json:"seriesPerTarget,omitempty"`
	// PointsPerCollection caps the samples kept by one collection across
	// all targets; 200,000 when zero. The target that would pass it fails.
	PointsPerCollection int `json:"pointsPerCollection,omitempty"`
}

// Config is the file given to the server.
type Config struct {
	// Presets names sets of metrics to serve in addition to Metrics:
	// "vllm", "sglang", "dcgm".
	Presets []string `json:"presets,omitempty"`
	Metrics []Metric `json:"metrics,omitempty"`

	Pods            PodTargets       `json:"pods,omitempty"`
	NodeExporters   []NodeExporter   `json:"nodeExporters,omitempty"`
	EndpointPickers []EndpointPicker `json:"endpointPickers,omitempty"`

	// Targets are scraped at every tick of the server's one scraper
	// (--metric-resolution), with the kubelets and ukpd.

	// Timeout bounds one scrape of one target; 5s when zero. The
	// scraper's own timeout (--kubelet-request-timeout) bounds it too.
	Timeout Duration `json:"timeout,omitempty"`
	// MaxBytes caps one target's response body; 1 MiB when zero (an
	// engine's or exporter's page is tens of kilobytes).
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// Limits bound labels, series and points per target and collection.
	Limits Limits `json:"limits,omitempty"`
}

// Duration is a time.Duration written as "5s" in the file.
type Duration struct{ time.Duration }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

const (
	defaultTimeout  = 5 * time.Second
	defaultMaxBytes = 1 << 20
	defaultPath     = "/metrics"

	// A real series line carries a handful of labels: vLLM's gauges two
	// (model_name and engine, presets.go), a DCGM exporter line about a
	// dozen (gpu, UUID, pci_bus_id, device, modelName, Hostname,
	// DCGM_FI_DRIVER_VERSION, the container, namespace and pod that hold
	// the GPU, pod_uid, as NVIDIA's dcgm-exporter documentation shows its
	// output), a few hundred bytes between the braces. 64 labels and 2 KiB
	// leave room for both several times over.
	defaultLabelsPerSeries     = 64
	defaultLabelBytesPerSeries = 2 << 10
	defaultSeriesPerTarget     = 10_000
	defaultPointsPerCollection = 200_000
)

// Parse reads a configuration file (YAML or JSON), expands its presets,
// fills defaults and validates it. It returns every problem found, not only
// the first; the Config is usable only when the slice is empty. Keys match
// case-sensitively, and unknown or repeated keys are errors reported beside
// the other problems of the file, so a misspelt key is neither silently
// ignored nor hiding the rest (sigs.k8s.io/json's strict decoding, as
// apimachinery's strict serializer reads API objects).
func Parse(data []byte) (*Config, []error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, []error{fmt.Errorf("read configuration: %w", err)}
	}
	var c Config
	strict, err := kjson.UnmarshalStrict(js, &c)
	var errs []error
	for _, e := range strict {
		errs = append(errs, fmt.Errorf("read configuration: %w", e))
	}
	if err != nil {
		// A value of the wrong shape: what was read is not worth
		// validating.
		return nil, append(errs, fmt.Errorf("read configuration: %w", err))
	}
	if errs = append(errs, c.complete()...); len(errs) > 0 {
		return nil, errs
	}
	return &c, nil
}

// complete expands presets, fills defaults and validates.
func (c *Config) complete() []error {
	var errs []error
	var expanded []Metric
	for i, p := range c.Presets {
		ms, ok := presets[p]
		if !ok {
			errs = append(errs, fmt.Errorf("presets[%d]: unknown preset %q (known: %s)", i, p, presetNames()))
			continue
		}
		expanded = append(expanded, ms...)
	}
	c.Metrics = append(expanded, c.Metrics...)
	c.Presets = nil
	if c.Timeout.Duration == 0 {
		c.Timeout.Duration = defaultTimeout
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = defaultMaxBytes
	}
	c.Limits.complete()
	for i := range c.EndpointPickers {
		c.EndpointPickers[i].complete()
	}
	for i := range c.NodeExporters {
		e := &c.NodeExporters[i]
		e.complete()
		e.NamespaceLabel = defaultString(e.NamespaceLabel, "namespace")
		e.PodLabel = defaultString(e.PodLabel, "pod")
		e.ContainerLabel = defaultString(e.ContainerLabel, "container")
	}
	return append(errs, c.Validate()...)
}

// complete fills the path and scheme left empty.
func (t *TrustedTarget) complete() {
	t.Path = defaultString(t.Path, defaultPath)
	t.Scheme = defaultString(t.Scheme, "http")
}

// complete fills the limits left at zero with their defaults.
func (l *Limits) complete() {
	l.LabelsPerSeries = defaultInt(l.LabelsPerSeries, defaultLabelsPerSeries)
	l.LabelBytesPerSeries = defaultInt(l.LabelBytesPerSeries, defaultLabelBytesPerSeries)
	l.SeriesPerTarget = defaultInt(l.SeriesPerTarget, defaultSeriesPerTarget)
	l.PointsPerCollection = defaultInt(l.PointsPerCollection, defaultPointsPerCollection)
}

func defaultInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
