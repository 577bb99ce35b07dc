package promscrape

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Pod is what the source needs to know of a pod. The pod cache fills it; the
// source never sees API objects.
type Pod struct {
	Namespace   string
	Name        string
	UID         string
	Labels      map[string]string
	Annotations map[string]string
	// IP is the pod's IP, "" until it has one.
	IP   string
	Node string
	// Running is true for phase Running; Ready mirrors the Ready condition.
	Running bool
	Ready   bool
	// HostNetwork is the pod's spec.hostNetwork: its IP is its node's.
	HostNetwork bool
	// ServiceAccount is the pod's spec.serviceAccountName.
	ServiceAccount string
}

// PodLister lists pods. Implementations must be safe for concurrent use and
// return pods the caller may read but not change.
type PodLister interface {
	// ListPods returns every pod the server knows, in any order.
	ListPods() []Pod
}

// Annotations by which a pod opts in. Our own prefix is honoured always; the
// Prometheus community's conventional prometheus.io/scrape, /port, /path and
// /scheme (a convention of the example Kubernetes scrape configuration in
// prometheus/prometheus documentation/examples/prometheus-kubernetes.yml,
// not a Kubernetes or Prometheus API) only with pods.prometheusAnnotations.
// They are off by default because a pod annotated for Prometheus asked to
// be collected by Prometheus, and many charts set them on every pod: reading
// them would make this server scrape the whole cluster's exporters.
const (
	AnnotationScrape = "metrics.group-metrics-server.io/scrape"
	AnnotationPort   = "metrics.group-metrics-server.io/port"
	AnnotationPath   = "metrics.group-metrics-server.io/path"
	AnnotationScheme = "metrics.group-metrics-server.io/scheme"

	promAnnotationPrefix = "prometheus.io/"
	ownAnnotationPrefix  = "metrics.group-metrics-server.io/"
)

// Kind of target, the "kind" label of the self-metrics.
const (
	KindPod      = "pod"
	KindExporter = "exporter"
	KindPicker   = "picker"
)

// Target is one endpoint to scrape.
type Target struct {
	// ID names the target in logs: "pod/<ns>/<name>",
	// "exporter/<exporter>/<ns>/<exporter pod>" or
	// "picker/<picker>/<ns>/<picker pod>".
	ID   string
	Kind string
	URL  string
	// Pod is the pod whose series these are, for a pod target; nil for an
	// exporter, whose series name their pods by labels, and for a picker,
	// whose series are its pool's.
	Pod      *Pod
	Exporter *NodeExporter
	Picker   *EndpointPicker
	// Namespace is the namespace of the pod scraped.
	Namespace string
	// UID is the UID of the pod scraped (the serving pod, or the
	// exporter's own pod).
	UID string
	// Node is the node of the pod scraped; an exporter's series may only
	// speak for pods on it.
	Node string
}

// Reasons a pod that matched was refused as a target, the "reason" label
// of the refusal counter. The set is closed.
const (
	// RefusedExporterNamespace: an exporter selector matched a pod outside
	// the exporter's namespaces.
	RefusedExporterNamespace = "exporter_namespace"
	// RefusedExporterServiceAccount: the pod runs as a service account the
	// exporter does not name.
	RefusedExporterServiceAccount = "exporter_service_account"
	// RefusedPickerNamespace and RefusedPickerServiceAccount are the same
	// for an endpoint picker's selector.
	RefusedPickerNamespace      = "picker_namespace"
	RefusedPickerServiceAccount = "picker_service_account"
	// RefusedHostNetwork: a hostNetwork pod asked to be scraped without
	// pods.allowHostNetwork.
	RefusedHostNetwork = "host_network"
)

// RefusedError is a pod that matched a selector or asked to be scraped
// but is not trusted to be the target it would be.
type RefusedError struct {
	Kind, Reason string
	// Pod is "<namespace>/<name>", UID its UID.
	Pod, UID string
	// Target names the exporter or picker whose selector matched, if any.
	Target string
}

func (e *RefusedError) Error() string {
	what := "pod target"
	if e.Target != "" {
		what = e.Kind + " " + e.Target
	}
	return fmt.Sprintf("pod %s refused as %s (%s)", e.Pod, what, e.Reason)
}

// Targets returns what to scrape, sorted by ID, and for each pod that asked
// to be scraped but could not be, an error saying why (bad annotation, no
// IP yet is not an error: the pod is skipped silently until it has one). A
// pod refused for trust (an exporter's selector matching outside its
// namespaces or service accounts, a hostNetwork pod) is a *RefusedError.
func (c *Config) Targets(pods []Pod) ([]Target, []error) {
	var (
		targets []Target
		errs    []error
	)
	for i := range pods {
		p := &pods[i]
		if !p.Running || p.IP == "" {
			continue
		}
		for j := range c.NodeExporters {
			e := &c.NodeExporters[j]
			if t, err := e.target(KindExporter, p); err != nil {
				errs = append(errs, err)
			} else if t != nil {
				t.Exporter = e
				targets = append(targets, *t)
			}
		}
		for j := range c.EndpointPickers {
			e := &c.EndpointPickers[j]
			if t, err := e.target(KindPicker, p); err != nil {
				errs = append(errs, err)
			} else if t != nil {
				t.Picker = e
				targets = append(targets, *t)
			}
		}
		t, ok, err := c.Pods.podTarget(p)
		var refused *RefusedError
		switch {
		case errors.As(err, &refused):
			errs = append(errs, err)
		case err != nil:
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
		}
		if ok {
			targets = append(targets, t)
		}
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].ID < targets[j].ID })
	return targets, errs
}

// target is pod as a target of kind for t: nil when t's selector does not
// match it, a *RefusedError when it matches but is not trusted.
func (t *TrustedTarget) target(kind string, pod *Pod) (*Target, error) {
	if t.selector == nil || !t.selector.Matches(labels.Set(pod.Labels)) {
		return nil, nil
	}
	reason := ""
	switch {
	case !slices.Contains(t.Namespaces, pod.Namespace):
		reason = kind + "_namespace"
	case len(t.ServiceAccounts) > 0 && !slices.Contains(t.ServiceAccounts, pod.ServiceAccount):
		reason = kind + "_service_account"
	}
	if reason != "" {
		return nil, &RefusedError{Kind: kind, Reason: reason, Pod: pod.Namespace + "/" + pod.Name, UID: pod.UID, Target: t.Name}
	}
	return &Target{
		ID: fmt.Sprintf("%s/%s/%s/%s", kind, t.Name, pod.Namespace, pod.Name), Kind: kind,
		URL: endpoint(t.Scheme, pod.IP, t.Port, t.Path), UID: pod.UID, Node: pod.Node, Namespace: pod.Namespace,
	}, nil
}

func (p *PodTargets) podTarget(pod *Pod) (Target, bool, error) {
	selected := p.selector != nil && p.Selector != "" && p.selector.Matches(labels.Set(pod.Labels))
	get := func(key string) (string, bool) {
		if v, ok := pod.Annotations[ownAnnotationPrefix+key]; ok {
			return v, true
		}
		if p.PrometheusAnnotations {
			v, ok := pod.Annotations[promAnnotationPrefix+key]
			return v, ok
		}
		return "", false
	}
	if v, ok := get("scrape"); ok {
		switch v {
		case "true":
			selected = true
		case "false":
			return Target{}, false, nil
		default:
			return Target{}, false, fmt.Errorf("scrape annotation %q must be true or false", v)
		}
	}
	if !selected {
		return Target{}, false, nil
	}
	if pod.HostNetwork && !p.AllowHostNetwork {
		return Target{}, false, &RefusedError{Kind: KindPod, Reason: RefusedHostNetwork, Pod: pod.Namespace + "/" + pod.Name, UID: pod.UID}
	}
	port := p.Port
	if v, ok := get("port"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || !validPort(n) {
			return Target{}, false, fmt.Errorf("port annotation %q is not a port", v)
		}
		port = n
	}
	if port == 0 {
		return Target{}, false, fmt.Errorf("no port annotation")
	}
	path := defaultPath
	if v, ok := get("path"); ok {
		if !strings.HasPrefix(v, "/") {
			return Target{}, false, fmt.Errorf("path annotation %q must begin with /", v)
		}
		path = v
	}
	scheme := "http"
	if v, ok := get("scheme"); ok {
		if v != "http" && v != "https" {
			return Target{}, false, fmt.Errorf("scheme annotation %q must be http or https", v)
		}
		scheme = v
	}
	return Target{
		ID: "pod/" + pod.Namespace + "/" + pod.Name, Kind: KindPod,
		URL: endpoint(scheme, pod.IP, port, path), Pod: pod, UID: pod.UID, Node: pod.Node, Namespace: pod.Namespace,
	}, true, nil
}

func endpoint(scheme, ip string, port int, path string) string {
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(ip, strconv.Itoa(port))}
	// Path may carry a query (e.g. "/metrics?format=text"); keep it whole.
	if p, q, ok := strings.Cut(path, "?"); ok {
		u.Path, u.RawQuery = p, q
	} else {
		u.Path = path
	}
	return u.String()
}
