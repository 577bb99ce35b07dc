// Package provider answers metrics.k8s.io reads: it joins the pod cache
// (pkg/podcache, which lists and selects the pods, sorted by namespace and
// name) with the usage in the store and shapes the result as the API
// types. See pkg/podcache for why the provider, not the API layer, lists
// the pods.
//
// The store knows samples, not API types. The one value the provider
// derives per sample is a pod's containers as API types (ResourceList maps,
// the bulk of a list's cost): it keeps them in the cached pod's memo
// (podcache.Pod.SetMemo) under the store's sample number
// (store.PodUsage.Sample), shares them between every read of that sample,
// and loses them with the pod when the cache replaces or deletes it. The
// memo also keeps where the store found the sample (store.PodRef): the
// next read of the pod skips the store's look-ups of node and pod while no
// source has written the node since, which takes about a third off a
// list of every pod between scrapes (docs/benchmarks.md). A
// leader that reports for its group builds its containers from the group's
// totals at each read instead, and keeps nothing.
//
// A list without selectors (kubectl top pods) is copied from a snapshot
// of each namespace's items, joined once and kept until the namespace's
// pods, the store or the freshness of an item changes (snapshot.go); the
// HPA's lists, which carry a selector, are joined at each read.
package provider

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/apiserver"
	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// UsageReader is the store as the provider reads it.
type UsageReader interface {
	Pod(namespace, name, uid, node string, ref store.PodRef) (store.PodUsage, store.PodRef, *store.Unavailable)
	Node(name string) (store.Usage, *store.Unavailable)
	Generation() uint64
}

// Config configures a Provider.
type Config struct {
	Pods  podcache.Pods
	Nodes podcache.Nodes
	Usage UsageReader
	Clock clock.PassiveClock
	// Groups enables LeaderWorkerSet group aggregation.
	Groups bool
	// DefaultPolicy applies to leaders without a policy annotation.
	DefaultPolicy group.Policy
	// Readiness is the HPA's rule for CPU samples of pods not (yet) ready,
	// applied to the members of a group before its leader reports for it.
	Readiness group.Readiness
}

// Provider implements the metrics.k8s.io getters. It is safe for concurrent
// use.
type Provider struct {
	pods  podcache.Pods
	nodes podcache.Nodes
	usage UsageReader
	clock clock.PassiveClock

	groups        bool
	defaultPolicy group.Policy
	readiness     group.Readiness

	snaps snapshots
}

var (
	_ apiserver.PodMetricsGetter  = &Provider{}
	_ apiserver.NodeMetricsGetter = &Provider{}
)

// New returns a Provider.
func New(cfg Config) *Provider {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.DefaultPolicy == "" {
		cfg.DefaultPolicy = group.PolicyPod
	}
	return &Provider{
		pods: cfg.Pods, nodes: cfg.Nodes, usage: cfg.Usage, clock: cfg.Clock,
		groups: cfg.Groups, defaultPolicy: cfg.DefaultPolicy, readiness: cfg.Readiness,
	}
}

var (
	podResource  = metricsapi.Resource("podmetrics")
	nodeResource = metricsapi.Resource("nodemetrics")
)

// notFound is a NotFound StatusError whose message says why.
func notFound(r schema.GroupResource, name, why string) error {
	err := apierrors.NewNotFound(r, name)
	err.ErrStatus.Message = fmt.Sprintf("%s %q has no metrics: %s", r.String(), name, why)
	return err
}

// GetPodMetrics implements apiserver.PodMetricsGetter.
func (p *Provider) GetPodMetrics(_ context.Context, namespace, name string) (*metricsapi.PodMetrics, error) {
	pod, ok := p.pods.Pod(namespace, name)
	if !ok {
		return nil, apierrors.NewNotFound(podResource, name)
	}
	now := p.clock.Now()
	var it item
	if _, why := p.item(&it, pod, now); why != "" {
		return nil, notFound(podResource, name, why)
	}
	observeAge("pods", now, it.timestamp)
	m := &metricsapi.PodMetrics{}
	it.writeTo(m, metav1.NewTime(now))
	return m, nil
}

// item is what a pod reports, as a list keeps it: the fields of its
// PodMetrics that are not zero but for the creation time, which is the
// request's. An item is a third of a PodMetrics' size, so a list of
// items kept between requests is copied out in a third of the reads.
type item struct {
	name, namespace     string
	labels, annotations map[string]string
	timestamp           time.Time
	window              time.Duration
	containers          []metricsapi.ContainerMetrics
}

// writeTo writes the item to m, which is zero. Field by field: m is in a
// list of hundreds of MB, written while the collector may be marking,
// and assigning a whole PodMetrics puts every pointer slot of its 344
// bytes through the write barrier, not only the few set here.
func (it *item) writeTo(m *metricsapi.PodMetrics, created metav1.Time) {
	m.Name, m.Namespace, m.Labels = it.name, it.namespace, it.labels
	if it.annotations != nil {
		m.Annotations = it.annotations
	}
	m.CreationTimestamp = created
	m.Timestamp = metav1.NewTime(it.timestamp)
	m.Window = metav1.Duration{Duration: it.window}
	m.Containers = it.containers
}

// item writes what the pod reports to it, or says why it reports nothing
// (and leaves it as it was). freshUntil is the last instant the usage may
// be served (store.PodUsage.FreshUntil).
func (p *Provider) item(it *item, pod *podcache.Pod, now time.Time) (freshUntil time.Time, why string) {
	u, ref, why := p.podUsage(pod)
	if why != "" {
		return time.Time{}, why
	}
	var (
		containers  []metricsapi.ContainerMetrics
		annotations map[string]string
	)
	if policy, ok := p.groupPolicy(pod); ok {
		if containers, annotations, why = p.groupContainers(pod, policy, u, now); why != "" {
			return time.Time{}, why
		}
	} else {
		containers = shapedContainers(pod, u, ref)
	}
	*it = item{
		name: pod.Name, namespace: pod.Namespace,
		labels: pod.Labels, annotations: annotations,
		timestamp: u.Timestamp, window: u.Window,
		containers: containers,
	}
	return u.FreshUntil, ""
}

// podUsage is the pod's usage and where the store found it, or why it has
// none: it is not running, the store has none, or a container the pod runs
// has none. The look-up starts from where the pod's memo says the last
// one found it.
func (p *Provider) podUsage(pod *podcache.Pod) (store.PodUsage, store.PodRef, string) {
	if why := notRunning(pod); why != "" {
		return store.PodUsage{}, store.PodRef{}, why
	}
	var ref store.PodRef
	if s := shapedOf(pod); s != nil {
		ref = s.ref
	}
	u, ref, why := p.usage.Pod(pod.Namespace, pod.Name, pod.UIDString(), pod.NodeName(), ref)
	if why != nil {
		return store.PodUsage{}, store.PodRef{}, why.Reason
	}
	if c := missingContainer(pod, u); c != "" {
		return store.PodUsage{}, store.PodRef{}, fmt.Sprintf("container %q of the pod has no usage: a pod is served only with every container it runs", c)
	}
	return u, ref, ""
}

// missingContainer names a container the pod runs, one of its spec's
// containers or a sidecar that is running, that has no usage; "" when
// there is none. A pod served with some of its containers would read low
// against its whole request, which the HPA sums over every container.
// metrics-server v0.8.0 goes by what the kubelet reported instead: it drops
// a pod when one of the reported containers has no earlier sample, but
// serves a pod whose running container the kubelet left out
// (pkg/storage/pod.go, podStorage.GetMetrics).
func missingContainer(pod *podcache.Pod, u store.PodUsage) string {
	has := func(name string) bool {
		for i := range u.Containers {
			if u.Containers[i].Name == name {
				return true
			}
		}
		return false
	}
	for _, name := range pod.Containers() {
		if !has(name) {
			return name
		}
	}
	for _, name := range pod.RunningSidecars() {
		if !has(name) {
			return name
		}
	}
	return ""
}

func notRunning(pod *podcache.Pod) string {
	switch {
	case pod.NodeName() == "":
		return "the pod is not scheduled to a node yet"
	case pod.Phase() != corev1.PodRunning:
		return fmt.Sprintf("the pod is %s; only running pods have metrics", pod.Phase())
	}
	return ""
}

// ListPodMetrics implements apiserver.PodMetricsGetter. Items come sorted
// by namespace and name, as the pod cache lists them. A list without
// selectors is served from the namespaces' snapshots (snapshot.go).
func (p *Provider) ListPodMetrics(_ context.Context, namespace string, ls labels.Selector, fs fields.Selector) ([]metricsapi.PodMetrics, error) {
	now := p.clock.Now()
	var parts []joined
	if (ls == nil || ls.Empty()) && (fs == nil || fs.Empty()) {
		parts = p.snapshots(namespace, now)
	} else {
		parts = []joined{p.join(p.pods.List(namespace, ls), fs, now)}
	}
	n := 0
	oldest := now
	for i := range parts {
		n += len(parts[i].items)
		if parts[i].oldest.Before(oldest) {
			oldest = parts[i].oldest
		}
	}
	// Every item is written once, in place: a list of every pod is
	// several hundred bytes a pod, and most of its cost is writing them.
	out := make([]metricsapi.PodMetrics, n)
	created := metav1.NewTime(now)
	n = 0
	for i := range parts {
		for j := range parts[i].items {
			parts[i].items[j].writeTo(&out[n], created)
			n++
		}
	}
	if n > 0 {
		observeAge("pods", now, oldest)
	}
	return out, nil
}

// joined is what a list's pods report: the items of those that report,
// in their order, the oldest sample among them, the first instant one of
// them turns stale, and whether one of them may answer otherwise at any
// moment (a leader reporting for its group, which the HPA's readiness
// rule reads against the time).
type joined struct {
	items      []item
	oldest     time.Time
	freshUntil time.Time
	live       bool
}

// forever is later than any sample turns stale: a list of pods none of
// which reports holds until the pod cache or the store changes.
var forever = time.Unix(1<<62, 0)

// join looks up the usage of each of pods that fs matches (nil: every
// one) and keeps the items of those that report.
func (p *Provider) join(pods []*podcache.Pod, fs fields.Selector, now time.Time) joined {
	j := joined{oldest: now, freshUntil: forever}
	byField := fs != nil && !fs.Empty()
	items := make([]item, len(pods))
	n := 0
	for _, pod := range pods {
		if byField && !matches(fs, pod.Name, pod.Namespace) {
			continue
		}
		if _, ok := p.groupPolicy(pod); ok {
			j.live = true
		}
		// items[n] is zero: make's, or left so by a pod that reports nothing.
		it := &items[n]
		freshUntil, why := p.item(it, pod, now)
		if why != "" {
			continue
		}
		n++
		if it.timestamp.Before(j.oldest) {
			j.oldest = it.timestamp
		}
		if freshUntil.Before(j.freshUntil) {
			j.freshUntil = freshUntil
		}
	}
	j.items = items[:n]
	return j
}

func matches(fs fields.Selector, name, namespace string) bool {
	if fs == nil || fs.Empty() {
		return true
	}
	return fs.Matches(fields.Set{"metadata.name": name, "metadata.namespace": namespace})
}

// shapedContainers shapes a pod's container usage as the API types, once per
// sample: the result is kept in the pod's memo with ref, where the store
// found the sample, and shared by every answer until the next sample
// (building the ResourceList maps was most of the cost of a list). Nothing
// downstream modifies it.
func shapedContainers(pod *podcache.Pod, u store.PodUsage, ref store.PodRef) []metricsapi.ContainerMetrics {
	if u.Sample == 0 {
		return shape(make([]metricsapi.ContainerMetrics, len(u.Containers)), u) // not from a Store: nothing to key it by
	}
	old := shapedOf(pod)
	if old != nil && old.memo.Key == u.Sample && old.ref == ref {
		return old.containers
	}
	s := &shapedPod{ref: ref}
	switch n := len(u.Containers); {
	case old != nil && old.memo.Key == u.Sample:
		s.containers = old.containers // the same sample, found anew
	case n <= len(s.inline):
		s.containers = shape(s.inline[:n], u)
	default:
		s.containers = shape(make([]metricsapi.ContainerMetrics, n), u)
	}
	s.memo = podcache.Memo{Key: u.Sample, Value: s}
	pod.SetMemo(&s.memo)
	return s.containers
}

// shapedOf is what the pod's memo keeps, or nil.
func shapedOf(pod *podcache.Pod) *shapedPod {
	if m := pod.Memo(); m != nil {
		return m.Value.(*shapedPod)
	}
	return nil
}

// shapedPod is a pod's containers shaped for one sample, where the store
// found it, and the memo that keeps them on the pod: one allocation, and
// none more for the containers of a pod of at most two.
type shapedPod struct {
	memo       podcache.Memo
	ref        store.PodRef
	containers []metricsapi.ContainerMetrics
	inline     [2]metricsapi.ContainerMetrics
}

// shape writes u's containers to out, which has room for them all.
func shape(out []metricsapi.ContainerMetrics, u store.PodUsage) []metricsapi.ContainerMetrics {
	for i := range u.Containers {
		c := &u.Containers[i]
		out[i] = metricsapi.ContainerMetrics{Name: c.Name, Usage: resourceList(c.Usage)}
	}
	return out
}

// resourceList is a usage as the API types. Each quantity carries its
// canonical string, formatted here once per sample: both encodings write
// that string (protobuf asks for it twice per quantity), and would format
// it again at every read of a list otherwise.
func resourceList(u store.Usage) corev1.ResourceList {
	cpu := resource.NewScaledQuantity(int64(u.CPUNanoCores), resource.Nano)
	mem := resource.NewQuantity(int64(u.MemoryBytes), resource.BinarySI)
	_, _ = cpu.String(), mem.String()
	return corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem}
}

// GetNodeMetrics implements apiserver.NodeMetricsGetter.
func (p *Provider) GetNodeMetrics(_ context.Context, name string) (*metricsapi.NodeMetrics, error) {
	node, ok := p.nodes.Node(name)
	if !ok {
		return nil, apierrors.NewNotFound(nodeResource, name)
	}
	u, why := p.usage.Node(name)
	if why != nil {
		return nil, notFound(nodeResource, name, why.Reason)
	}
	now := p.clock.Now()
	observeAge("nodes", now, u.Timestamp)
	m := nodeMetrics(node, u, now)
	return &m, nil
}

// ListNodeMetrics implements apiserver.NodeMetricsGetter. Items come
// sorted by name.
func (p *Provider) ListNodeMetrics(_ context.Context, ls labels.Selector, fs fields.Selector) ([]metricsapi.NodeMetrics, error) {
	nodes := p.nodes.List(ls)
	now := p.clock.Now()
	oldest := now
	out := make([]metricsapi.NodeMetrics, 0, len(nodes))
	for _, node := range nodes {
		if !matches(fs, node.Name, "") {
			continue
		}
		u, why := p.usage.Node(node.Name)
		if why != nil {
			continue
		}
		if u.Timestamp.Before(oldest) {
			oldest = u.Timestamp
		}
		out = append(out, nodeMetrics(node, u, now))
	}
	if len(out) > 0 {
		observeAge("nodes", now, oldest)
	}
	return out, nil
}

func nodeMetrics(node *podcache.Node, u store.Usage, now time.Time) metricsapi.NodeMetrics {
	return metricsapi.NodeMetrics{
		ObjectMeta: metav1.ObjectMeta{
			Name:              node.Name,
			Labels:            node.Labels,
			CreationTimestamp: metav1.NewTime(now),
		},
		Timestamp: metav1.NewTime(u.Timestamp),
		Window:    metav1.Duration{Duration: u.Window},
		Usage:     resourceList(u),
	}
}

var (
	servedAge = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "api",
		Name:           "metric_age_seconds",
		Help:           "Age of the oldest sample in each metrics.k8s.io answer, by resource (pods, nodes), measured against the sample's own timestamp.",
		Buckets:        []float64{1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	registerOnce sync.Once
)

// RegisterMetrics registers the provider's self-metrics; safe to call twice.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(servedAge) })
}

func observeAge(resource string, now, sample time.Time) {
	servedAge.WithLabelValues(resource).Observe(now.Sub(sample).Seconds())
}
