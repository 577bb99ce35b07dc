package ukpd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// endpoint is the lasting state of one ukpd endpoint: its client, the
// cached instance list and what the last scrape saw of each instance.
type endpoint struct {
	cfg         EndpointConfig
	client      *Client
	pods        podcache.Pods
	clock       clock.PassiveClock
	listRefresh time.Duration
	required    []string // tags every attributed instance carries

	mu       sync.Mutex // held for a whole scrape; guards the fields below
	byUUID   map[string]*Instance
	byName   map[string]*Instance
	listedAt time.Time
	// unresolved holds the metrics entries that were unknown right after
	// the last list fetch, so that they do not force a fetch every scrape.
	unresolved map[string]struct{}
	timelines  map[string]timeline // by instance UUID
	// duplicates is how many instances the last scrape left out as a
	// second instance of a container, logged when it changes.
	duplicates int
	// conflicts are the instances the last scrape attributed by
	// containerID against their tags, each logged once.
	conflicts map[string]bool
}

func newEndpoint(cfg EndpointConfig, client *Client, pods podcache.Pods, clk clock.PassiveClock, refresh time.Duration, required []string) *endpoint {
	return &endpoint{cfg: cfg, client: client, pods: pods, clock: clk, listRefresh: refresh, required: required}
}

// target is one endpoint with the nodes it owns this tick.
type target struct {
	ep    *endpoint
	nodes []string
}

func (t *target) ID() string      { return "ukpd/" + t.ep.client.String() }
func (t *target) Nodes() []string { return t.nodes }

func (t *target) Scrape(ctx context.Context) (*sources.Batch, error) {
	return t.ep.scrape(ctx, t.nodes)
}

// scrape fetches the metrics, refreshes the instance list when it is due or
// names an unknown instance, and attributes each running instance to its
// pod's container. If the list cannot be fetched but an older one is
// cached, that one is used and the error returned with the batch.
func (e *endpoint) scrape(ctx context.Context, nodes []string) (*sources.Batch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	samples, err := e.client.Metrics(ctx)
	if samples == nil {
		return nil, err
	}
	now := e.clock.Now()
	var problems []error
	if err != nil {
		problems = append(problems, err)
	}
	if err := e.refreshList(ctx, now, samples); err != nil {
		if e.byUUID == nil {
			return nil, err
		}
		problems = append(problems, err)
	}
	owned := make(map[string]struct{}, len(nodes))
	for _, n := range nodes {
		owned[n] = struct{}{}
	}
	batch, ignored, conflicts, err := e.attribute(ctx, samples, now, owned)
	if err != nil {
		return nil, err
	}
	e.noteConflicts(conflicts)
	for reason, n := range ignored {
		ignoredInstances.WithLabelValues(reason).Add(float64(n))
	}
	if len(ignored) > 0 {
		klog.V(4).InfoS("Left out ukpd instances", "endpoint", e.client.String(), "ignored", ignored)
	}
	if d := ignored[ignoredDuplicate]; d != e.duplicates {
		if d > 0 {
			klog.InfoS("Several ukpd instances claim the same pod containers; the one started last is used. "+
				"If clusters share the account, give each its own kraftlet node name or required tag (docs/ukpd.md)",
				"endpoint", e.client.String(), "instances", d)
		}
		e.duplicates = d
	}
	return batch, errors.Join(problems...)
}

// noteConflicts counts the instances attributed by containerID against
// their tags and logs each once, for as long as it lasts.
func (e *endpoint) noteConflicts(conflicts map[string]string) {
	tagConflicts.Add(float64(len(conflicts)))
	seen := make(map[string]bool, len(conflicts))
	for uuid, pod := range conflicts {
		seen[uuid] = true
		if !e.conflicts[uuid] {
			klog.InfoS("A ukpd instance's tags name another pod than the pod whose containerID it is; the containerID wins",
				"endpoint", e.client.String(), "instance", uuid, "pod", pod)
		}
	}
	e.conflicts = seen
}

// refreshList fetches the instance list when none is cached, when it is
// older than listRefresh, or when a metrics entry names an instance it does
// not hold. On failure the cached list stays.
func (e *endpoint) refreshList(ctx context.Context, now time.Time, samples []Sample) error {
	var trigger string
	switch {
	case e.byUUID == nil:
		trigger = triggerInitial
	case now.Sub(e.listedAt) >= e.listRefresh:
		trigger = triggerRefresh
	default:
		for _, s := range samples {
			if _, known := e.unresolved[sampleKey(s)]; !known && e.lookup(s) == nil {
				trigger = triggerUnknownInstance
				break
			}
		}
	}
	if trigger == "" {
		return nil
	}
	listFetches.WithLabelValues(trigger).Inc()
	list, err := e.client.Instances(ctx)
	if list == nil {
		return err
	}
	e.byUUID = make(map[string]*Instance, len(list))
	e.byName = make(map[string]*Instance, len(list))
	for i := range list {
		inst := &list[i]
		e.byUUID[inst.UUID] = inst
		if inst.Name != "" {
			e.byName[inst.Name] = inst
		}
	}
	e.listedAt = now
	e.unresolved = map[string]struct{}{}
	for _, s := range samples {
		if e.lookup(s) == nil {
			e.unresolved[sampleKey(s)] = struct{}{}
		}
	}
	return err
}

// lookup finds a sample's instance by UUID, or by name when the sample has
// no UUID.
func (e *endpoint) lookup(s Sample) *Instance {
	if s.UUID != "" {
		return e.byUUID[s.UUID]
	}
	return e.byName[s.Name]
}

// candidate is a container's sample on its way into the batch.
type candidate struct {
	uuid    string
	started time.Time
	point   sources.Point
}

type podAt struct {
	namespace, name, node string
}

type podEntry struct {
	pod        *podcache.Pod
	containers map[string]candidate
}

// attribute turns samples into a batch of the owned nodes' pods and counts,
// by reason, the instances it leaves out.
//
// It looks at ctx every attributeCtxCheck samples and fails when it is
// done.
func (e *endpoint) attribute(ctx context.Context, samples []Sample, now time.Time, owned map[string]struct{}) (*sources.Batch, map[string]int, map[string]string, error) {
	finder := newPodFinder(e.pods)
	ignored := map[string]int{}
	conflicts := map[string]string{}
	timelines := make(map[string]timeline, len(samples))
	pods := map[podAt]*podEntry{}
	for i, s := range samples {
		if i%attributeCtxCheck == attributeCtxCheck-1 {
			if err := ctx.Err(); err != nil {
				return nil, nil, nil, sources.WithReason(sources.TransportReason(err), fmt.Errorf("ukpd %s: attribute instances: %w", e.client, err))
			}
		}
		inst := e.lookup(s)
		if inst == nil {
			ignored[ignoredUnknownInstance]++
			continue
		}
		if !plausibleCPU(inst, s) {
			ignored[ignoredImplausible]++
			continue
		}
		var prev *timeline
		if p, ok := e.timelines[inst.UUID]; ok {
			prev = &p
		}
		// Without a state in either response the instance is taken as running.
		state := cmp.Or(s.State, inst.State, stateRunning)
		tl := advance(prev, s, state, now)
		timelines[inst.UUID] = tl
		if !tl.has {
			ignored[ignoredNotRunning]++
			continue
		}

		pod, container, node, reason, conflict := e.resolve(finder, inst, owned)
		if reason != "" {
			ignored[reason]++
			continue
		}
		if conflict {
			conflicts[inst.UUID] = pod.Namespace + "/" + pod.Name
		}
		key := podAt{pod.Namespace, pod.Name, node}
		entry := pods[key]
		if entry == nil {
			entry = &podEntry{pod: pod, containers: map[string]candidate{}}
			pods[key] = entry
		}
		c := candidate{uuid: inst.UUID, started: s.StartedAt, point: tl.point}
		if old, dup := entry.containers[container]; dup {
			ignored[ignoredDuplicate]++
			if !newer(c, old) {
				continue
			}
		}
		entry.containers[container] = c
	}
	e.timelines = timelines
	return buildBatch(pods), ignored, conflicts, nil
}

// attributeCtxCheck is how many samples are attributed between two looks
// at the context.
const attributeCtxCheck = 1024

// resolve finds the pod, container and node of a running instance, or the
// reason to leave it out, and whether its tags conflict with the pod that
// claims it by containerID.
//
// A pod whose container status names the instance as its containerID
// (kraftlet writes the instance's UUID there) is its pod, on the pod's
// node: an exact join within the cluster, so no tag is needed, and tags
// that name another pod or container are a conflict, counted and logged.
// Otherwise the instance's kraftlet tags name the pod; a container whose
// status names another instance is not this one's.
func (e *endpoint) resolve(finder *podFinder, inst *Instance, owned map[string]struct{}) (pod *podcache.Pod, container, node, reason string, conflict bool) {
	ref, tagged := parseTags(inst.Tags)
	if pod, container, ok := e.pods.ByInstance(inst.UUID); ok {
		node = pod.NodeName()
		if _, mine := owned[node]; !mine {
			return nil, "", "", ignoredNodeNotOwned, false
		}
		conflict = tagged && (ref.namespace != pod.Namespace || ref.podTag != TagFor(TagPod, pod.Name) || ref.container != container)
		return pod, container, node, "", conflict
	}
	if !hasTags(inst.Tags, e.required) {
		return nil, "", "", ignoredMissingRequired, false
	}
	if !tagged {
		return nil, "", "", ignoredMissingTags, false
	}
	pod, reason = finder.find(ref)
	if reason != "" {
		return nil, "", "", reason, false
	}
	if !pod.RunsContainer(ref.container) {
		return nil, "", "", ignoredContainerNotFound, false
	}
	for _, in := range pod.Instances() {
		if in.Container == ref.container && !strings.EqualFold(in.UUID, inst.UUID) {
			return nil, "", "", ignoredOtherInstance, false
		}
	}
	node = nodeOf(ref, pod)
	if _, mine := owned[node]; !mine {
		return nil, "", "", ignoredNodeNotOwned, false
	}
	return pod, ref.container, node, "", false
}

// newer says whether c replaces old as the instance of a container: the one
// started last wins, ties going to the smaller UUID.
func newer(c, old candidate) bool {
	if !c.started.Equal(old.started) {
		return c.started.After(old.started)
	}
	return c.uuid < old.uuid
}

func buildBatch(pods map[podAt]*podEntry) *sources.Batch {
	b := &sources.Batch{Pods: make([]sources.PodPoint, 0, len(pods))}
	for key, entry := range pods {
		pp := sources.PodPoint{
			Namespace:  key.namespace,
			Name:       key.name,
			UID:        entry.pod.UIDString(),
			Node:       key.node,
			Containers: make([]sources.ContainerPoint, 0, len(entry.containers)),
		}
		var first sources.Point
		for name, c := range entry.containers {
			pp.Containers = append(pp.Containers, sources.ContainerPoint{Name: name, Point: c.point})
			first = c.point
		}
		// A container kraftlet ignores does not run: zero, over the span
		// of the pod's other containers.
		for _, name := range ignoredContainers(entry.pod) {
			if _, has := entry.containers[name]; !has {
				pp.Containers = append(pp.Containers, sources.ContainerPoint{Name: name, Point: sources.Point{
					Timestamp: first.Timestamp, StartTime: first.StartTime,
				}})
			}
		}
		slices.SortFunc(pp.Containers, func(a, b sources.ContainerPoint) int { return cmp.Compare(a.Name, b.Name) })
		b.Pods = append(b.Pods, pp)
	}
	slices.SortFunc(b.Pods, func(a, b sources.PodPoint) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Node, b.Node))
	})
	return b
}
