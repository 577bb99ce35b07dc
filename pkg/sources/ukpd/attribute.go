package ukpd

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
)

// The tags kraftlet puts on the instance it runs for a container.
const (
	TagNamespace = "k8s.io:namespace"
	TagPod       = "k8s.io:pod"
	TagContainer = "k8s.io:container"
	TagNode      = "kraftlet:node"
	// MaxTagBytes is the longest tag the platform keeps.
	MaxTagBytes = 256
)

// TagFor returns the tag kraftlet writes for key and value: "key=value",
// every character outside [A-Za-z0-9-+_.:=] replaced by "_", cut to
// MaxTagBytes.
func TagFor(key, value string) string {
	var b strings.Builder
	b.Grow(len(key) + 1 + len(value))
	for _, r := range key + "=" + value {
		if b.Len() == MaxTagBytes {
			break
		}
		if tagChar(r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func tagChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("-+_.:=", r)
}

// tagRef is what an instance's tags say it belongs to. The raw tags are kept
// to compare against TagFor of Kubernetes names, which tells a cut name
// apart from a different one.
type tagRef struct {
	namespace, pod, container, node string
	podTag, nodeTag                 string
}

// parseTags reads the kraftlet tags. It fails when the namespace, pod or
// container tag is missing or a key is given twice with different values.
func parseTags(tags []string) (tagRef, bool) {
	var ref tagRef
	set := func(dst, raw *string, value, tag string) bool {
		if *dst != "" && *dst != value {
			return false
		}
		*dst = value
		if raw != nil {
			*raw = tag
		}
		return true
	}
	for _, t := range tags {
		key, value, ok := strings.Cut(t, "=")
		if !ok || value == "" {
			continue
		}
		ok = true
		switch key {
		case TagNamespace:
			ok = set(&ref.namespace, nil, value, t)
		case TagPod:
			ok = set(&ref.pod, &ref.podTag, value, t)
		case TagContainer:
			ok = set(&ref.container, nil, value, t)
		case TagNode:
			ok = set(&ref.node, &ref.nodeTag, value, t)
		}
		if !ok {
			return tagRef{}, false
		}
	}
	return ref, ref.namespace != "" && ref.pod != "" && ref.container != ""
}

// Reasons an instance is left out, the "reason" label of
// group_metrics_server_ukpd_ignored_instances_total. The set is closed.
const (
	ignoredUnknownInstance   = "unknown_instance"
	ignoredNotRunning        = "not_running"
	ignoredMissingTags       = "missing_tags"
	ignoredPodNotFound       = "pod_not_found"
	ignoredAmbiguousPod      = "ambiguous_pod"
	ignoredContainerNotFound = "container_not_found"
	ignoredNodeNotOwned      = "node_not_owned"
	ignoredDuplicate         = "duplicate_container"
	ignoredMissingRequired   = "missing_required_tag"
	ignoredImplausible       = "implausible_usage"
	// ignoredOtherInstance: the tags name a container whose status names
	// another instance as its containerID.
	ignoredOtherInstance = "other_instance"
)

// plausibleCPU says whether s's CPU time fits what inst can have used: at
// most one core more than its vCPUs (room for the VMM's own threads) over
// its uptime, and a second for rounding. Without vCPUs or uptime there is
// no bound.
func plausibleCPU(inst *Instance, s Sample) bool {
	if inst.VCPUs <= 0 || !s.HasUptime {
		return true
	}
	return float64(s.CPUCoreNanos) <= float64(inst.VCPUs+1)*float64(s.Uptime.Nanoseconds())+1e9
}

// IgnoreAnnotation lists, comma-separated, the containers of a pod that
// kraftlet runs no instance for. They do not run, so they use nothing: the
// source reports them at zero alongside the pod's other containers. The pod
// cache keeps it.
const IgnoreAnnotation = podcache.IgnoreAnnotation

// ignoredContainers returns the containers of the pod that its
// IgnoreAnnotation names.
func ignoredContainers(pod *podcache.Pod) []string {
	v := pod.Annotation(IgnoreAnnotation)
	if v == "" {
		return nil
	}
	var out []string
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		for _, c := range pod.Containers() {
			if c == name && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// ParseRequiredTag reads a tag every instance must carry to be attributed,
// given as key=value. It must be a tag the platform keeps as it is: no
// character outside [A-Za-z0-9-+_.:=], at most MaxTagBytes.
func ParseRequiredTag(s string) (string, error) {
	key, value, ok := strings.Cut(s, "=")
	switch {
	case !ok || key == "" || value == "":
		return "", fmt.Errorf("required tag %q: want key=value", s)
	case TagFor(key, value) != s:
		return "", fmt.Errorf("required tag %q: the platform keeps at most %d bytes of [A-Za-z0-9-+_.:=]", s, MaxTagBytes)
	}
	return s, nil
}

// hasTags says whether tags holds every one of required.
func hasTags(tags, required []string) bool {
	for _, r := range required {
		if !slices.Contains(tags, r) {
			return false
		}
	}
	return true
}

// podFinder resolves tags to pods for one scrape. A pod tag at the length
// limit may hold a cut name: then every pod of the namespace whose tag
// would read the same is a candidate, and exactly one must match. The tags
// of a namespace's pods are computed once per scrape, when the first cut
// tag of that namespace asks for them, so attribution stays linear in the
// instances and pods however many tags are cut.
type podFinder struct {
	pods podcache.Pods
	// cut maps a namespace to its pods by the pod tag kraftlet would write.
	cut map[string]map[string][]*podcache.Pod
}

func newPodFinder(pods podcache.Pods) *podFinder {
	return &podFinder{pods: pods, cut: map[string]map[string][]*podcache.Pod{}}
}

// find returns the pod an instance's tags name, or why there is none.
func (f *podFinder) find(ref tagRef) (*podcache.Pod, string) {
	pod, ok := f.pods.Pod(ref.namespace, ref.pod)
	switch {
	case ok && TagFor(TagPod, pod.Name) == ref.podTag:
		return pod, ""
	case len(ref.podTag) < MaxTagBytes:
		return nil, ignoredPodNotFound
	}
	byTag, done := f.cut[ref.namespace]
	if !done {
		byTag = map[string][]*podcache.Pod{}
		for _, p := range f.pods.List(ref.namespace, labels.Everything()) {
			if tag := TagFor(TagPod, p.Name); len(tag) == MaxTagBytes {
				byTag[tag] = append(byTag[tag], p)
			}
		}
		f.cut[ref.namespace] = byTag
	}
	switch match := byTag[ref.podTag]; len(match) {
	case 0:
		return nil, ignoredPodNotFound
	case 1:
		return match[0], ""
	default:
		return nil, ignoredAmbiguousPod
	}
}

// nodeOf returns the node the instance runs on: the kraftlet:node tag, read
// as the pod's node name when that name yields the same tag (it may have
// been cut), else the pod's spec.nodeName.
func nodeOf(ref tagRef, pod *podcache.Pod) string {
	switch {
	case ref.nodeTag == "":
		return pod.NodeName()
	case pod.NodeName() != "" && TagFor(TagNode, pod.NodeName()) == ref.nodeTag:
		return pod.NodeName()
	}
	return ref.node
}
