package podcache

import (
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// Pod is one cached pod as the server reads it: what the server needs of
// the API object, and what is derived from it, computed once when the
// object changes. It is what the pod informer stores (TrimPod makes it),
// so the cache holds no API pod at all: requests are kept as integers, not
// as the ResourceList maps of the object, which were most of a cached
// pod's size. A Pod is never modified after it is made, but for its memo.
type Pod struct {
	// memo is what a reader derived from the pod and a sample of its
	// usage (Memo, SetMemo).
	memo atomic.Pointer[Memo]

	podData
}

// podData is what a Pod holds of the object. What every read of a pod's
// metrics looks at comes first, next to the name, namespace and labels: a
// list of every pod touches each once, so the fewer cache lines they take,
// the fewer misses it makes.
type podData struct {
	nodeName string
	phase    corev1.PodPhase
	// names are the names of the spec's containers in spec order, then of
	// its restartable init containers (sidecars); requests are theirs.
	names []string
	// runningSidecars names the sidecars that run.
	runningSidecars []string
	// sidecars is how many of names are sidecars, at the end.
	sidecars int32
	ready    readyStatus
	inGroup  bool
	leader   bool
	// hostNetwork is spec.hostNetwork: the pod's IP is its node's.
	hostNetwork bool

	// ObjectMeta keeps name, namespace, UID, resource version, labels, the
	// annotations the server reads and the deletion timestamp; read-only.
	metav1.ObjectMeta

	// labels holds ObjectMeta.Labels, shared with every cached pod of the
	// same labels (labelSets), alive while a pod holds it.
	labels *labelSet

	podIP     string
	startTime *metav1.Time
	// readySince is when the Ready condition last changed: kept inline
	// with its status (ready), not as the condition, which is an
	// allocation of 128 bytes.
	readySince metav1.Time

	requests []group.Requests
	request  group.Requests
	groupKey string
	// serviceAccount is spec.serviceAccountName.
	serviceAccount string
	// controller is the pod's controller reference (kind, name and UID
	// only), nil when it has none.
	controller *Controller
	// instances are the containers whose status names a unikernel
	// instance (InstanceOf).
	instances []ContainerInstance
}

// ContainerInstance is a container and the UUID of the instance that runs
// it, as its status's containerID names it.
type ContainerInstance struct {
	Container, UUID string
}

// Controller is the part of a controller reference the server reads.
type Controller struct {
	Kind, Name string
	UID        types.UID
}

// Memo is a value a reader derived from a Pod and from something that
// changes without the Pod, such as a sample of the pod's usage, named by
// Key.
type Memo struct {
	Key   uint64
	Value any
}

// Memo returns what SetMemo last kept on the pod, or nil.
func (p *Pod) Memo() *Memo { return p.memo.Load() }

// SetMemo keeps m on the pod, in place of the previous memo. The memo
// lives and dies with the Pod, which the cache replaces when the object
// changes and drops when it is deleted: its reader needs no map of its own
// keyed by pod, nor to hear of pods that leave. One reader owns the slot:
// the provider, for a pod's containers shaped as the API types.
func (p *Pod) SetMemo(m *Memo) { p.memo.Store(m) }

// readyStatus is the status of a pod's Ready condition, in a byte.
type readyStatus uint8

const (
	readyNone readyStatus = iota // no Ready condition
	readyTrue
	readyFalse
	readyUnknown // Unknown, or a status the API does not define
)

func readyStatusOf(s corev1.ConditionStatus) readyStatus {
	switch s {
	case corev1.ConditionTrue:
		return readyTrue
	case corev1.ConditionFalse:
		return readyFalse
	}
	return readyUnknown
}

func (r readyStatus) condition() corev1.ConditionStatus {
	switch r {
	case readyTrue:
		return corev1.ConditionTrue
	case readyFalse:
		return corev1.ConditionFalse
	}
	return corev1.ConditionUnknown
}

var (
	_ metav1.Object  = &Pod{}
	_ runtime.Object = &Pod{}
)

// NewPod makes the Pod of an API pod; it keeps no reference to obj's
// spec or status.
func NewPod(obj *corev1.Pod) *Pod {
	labels := internedLabels.intern(obj.Labels)
	p := &Pod{podData: podData{
		ObjectMeta: metav1.ObjectMeta{
			Name:              obj.Name,
			Namespace:         obj.Namespace,
			UID:               obj.UID,
			ResourceVersion:   obj.ResourceVersion,
			Annotations:       ownAnnotations(obj.Annotations),
			DeletionTimestamp: obj.DeletionTimestamp,
		},
		labels:    labels,
		nodeName:  obj.Spec.NodeName,
		podIP:     obj.Status.PodIP,
		phase:     obj.Status.Phase,
		startTime: obj.Status.StartTime,
		request:   group.PodRequests(obj),

		hostNetwork:    obj.Spec.HostNetwork,
		serviceAccount: obj.Spec.ServiceAccountName,
	}}
	if ref := metav1.GetControllerOf(obj); ref != nil {
		p.controller = &Controller{Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
	}
	if labels != nil {
		p.Labels = labels.labels
	}
	for _, c := range obj.Status.Conditions {
		if c.Type == corev1.PodReady {
			p.ready, p.readySince = readyStatusOf(c.Status), c.LastTransitionTime
			break
		}
	}
	n := len(obj.Spec.Containers)
	for i := range obj.Spec.InitContainers {
		if group.IsSidecar(&obj.Spec.InitContainers[i]) {
			p.sidecars++
		}
	}
	if total := n + int(p.sidecars); total > 0 {
		p.names, p.requests = make([]string, 0, total), make([]group.Requests, 0, total)
	}
	for i := range obj.Spec.Containers {
		c := &obj.Spec.Containers[i]
		p.names, p.requests = append(p.names, c.Name), append(p.requests, containerRequests(c))
	}
	for i := range obj.Spec.InitContainers {
		if c := &obj.Spec.InitContainers[i]; group.IsSidecar(c) {
			p.names, p.requests = append(p.names, c.Name), append(p.requests, containerRequests(c))
		}
	}
	p.runningSidecars = runningSidecars(obj)
	p.instances = instancesOf(obj)
	p.groupKey, p.inGroup = group.Key(obj)
	p.leader = group.IsLeader(obj)
	return p
}

func containerRequests(c *corev1.Container) group.Requests {
	var r group.Requests
	for i, name := range group.Resources {
		if q, ok := c.Resources.Requests[name]; ok {
			r.Milli[i], r.Has[i] = q.MilliValue(), true
		}
	}
	return r
}

// GetObjectKind implements runtime.Object: a Pod carries no kind.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. A Pod is never modified, so
// the copy shares what the original points to; it starts without a memo.
func (p *Pod) DeepCopyObject() runtime.Object {
	return &Pod{podData: p.podData}
}

// NodeName is the node the pod is bound to, "" before it is scheduled.
func (p *Pod) NodeName() string { return p.nodeName }

// IP is the pod's primary IP (status.podIP), "" until it has one; the
// pod-endpoint source scrapes it.
func (p *Pod) IP() string { return p.podIP }

// Ready says whether the pod's Ready condition is True.
func (p *Pod) Ready() bool { return p.ready == readyTrue }

// UIDString is the pod's UID.
func (p *Pod) UIDString() string { return string(p.UID) }

// Annotation returns one of the annotations the cache keeps
// (AnnotationPrefix, ScrapeAnnotationPrefix, the four prometheus.io scrape
// annotations, IgnoreAnnotation); "" for any other.
func (p *Pod) Annotation(key string) string { return p.Annotations[key] }

// Phase is the pod's phase; Deleting says whether it is being deleted.
func (p *Pod) Phase() corev1.PodPhase { return p.phase }
func (p *Pod) Deleting() bool         { return p.DeletionTimestamp != nil }

// Containers are the names of the spec's containers, in spec order;
// read-only.
func (p *Pod) Containers() []string {
	n := len(p.names) - int(p.sidecars)
	return p.names[:n:n] // an append copies rather than overwrite the sidecars
}

// RunningSidecars are the names of the restartable init containers that
// run; read-only. A sidecar that runs has usage like any container.
func (p *Pod) RunningSidecars() []string { return p.runningSidecars }

// RunsContainer says whether the pod has a container or a sidecar of that
// name. A pod whose spec lists no containers is taken to run any.
func (p *Pod) RunsContainer(name string) bool {
	if len(p.names) == int(p.sidecars) {
		return true
	}
	return slices.Contains(p.names, name)
}

// Request is the pod's request as the HPA counts it (group.PodRequests).
func (p *Pod) Request() group.Requests { return p.request }

// ContainerRequest is the request of the named container or sidecar for
// the resource at index r of group.Resources, in group.Requests' units.
func (p *Pod) ContainerRequest(name string, r int) (int64, bool) {
	if i := slices.Index(p.names, name); i >= 0 {
		return p.requests[i].Milli[r], p.requests[i].Has[r]
	}
	return 0, false
}

// HostNetwork says whether the pod uses its node's network namespace
// (spec.hostNetwork), so that its IP is the node's.
func (p *Pod) HostNetwork() bool { return p.hostNetwork }

// ServiceAccount is the pod's spec.serviceAccountName.
func (p *Pod) ServiceAccount() string { return p.serviceAccount }

// ControllerRef is the pod's controller reference, nil when it has none;
// read-only.
func (p *Pod) ControllerRef() *Controller { return p.controller }

// GroupKey is the pod's LeaderWorkerSet group (group.Key) as its labels
// name it; ok is false for a pod of no group. Leader says whether its
// labels name it its group's leader (worker-index 0). Neither is verified:
// whether the pod belongs to the group is Pods.Group's answer, and whether
// it leads it is Pods.Leads'.
func (p *Pod) GroupKey() (key string, ok bool) { return p.groupKey, p.inGroup }
func (p *Pod) Leader() bool                    { return p.leader }

// ReadinessView is the part of the pod the HPA's readiness rule reads
// (group.Readiness): its start time and Ready condition, as an API pod.
func (p *Pod) ReadinessView() *corev1.Pod {
	v := &corev1.Pod{Status: corev1.PodStatus{StartTime: p.startTime}}
	if p.ready != readyNone {
		v.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: p.ready.condition(), LastTransitionTime: p.readySince}}
	}
	return v
}

// Instances are the pod's containers whose status's containerID is a
// unikernel instance's UUID; read-only.
func (p *Pod) Instances() []ContainerInstance { return p.instances }

// instancesOf reads the containers whose containerID is an instance UUID,
// bare or after a scheme ("<scheme>://<uuid>"), as kraftlet writes the
// instance it runs for a container. A container runtime's IDs (64 hex
// digits) are not UUIDs and are not kept, so the cache holds these only
// for pods on kraftlet nodes.
func instancesOf(p *corev1.Pod) []ContainerInstance {
	var out []ContainerInstance
	for _, st := range slices.Concat(p.Status.ContainerStatuses, p.Status.InitContainerStatuses) {
		id := st.ContainerID
		if _, rest, ok := strings.Cut(id, "://"); ok {
			id = rest
		}
		if isUUID(id) {
			out = append(out, ContainerInstance{Container: st.Name, UUID: strings.ToLower(id)})
		}
	}
	return out
}

// isUUID says whether s is a UUID in its text form (8-4-4-4-12 hex digits).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdefABCDEF", r):
			return false
		}
	}
	return true
}

// runningSidecars names the restartable init containers that are running.
func runningSidecars(p *corev1.Pod) []string {
	var out []string
	for _, st := range p.Status.InitContainerStatuses {
		if st.State.Running == nil {
			continue
		}
		for i := range p.Spec.InitContainers {
			if c := &p.Spec.InitContainers[i]; c.Name == st.Name && group.IsSidecar(c) {
				out = append(out, st.Name)
			}
		}
	}
	return out
}

// Node is one cached node, what the node informer stores (TrimNode makes
// it); read-only.
type Node struct {
	metav1.ObjectMeta
	addresses   []corev1.NodeAddress
	kubeletPort int
}

var (
	_ metav1.Object  = &Node{}
	_ runtime.Object = &Node{}
)

// NewNode makes the Node of an API node: name, UID, resource version,
// labels, ResourceMetricsPathAnnotation, addresses and kubelet port.
func NewNode(obj *corev1.Node) *Node {
	var annotations map[string]string
	if p, ok := obj.Annotations[ResourceMetricsPathAnnotation]; ok {
		annotations = map[string]string{ResourceMetricsPathAnnotation: p}
	}
	return &Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:            obj.Name,
			UID:             obj.UID,
			ResourceVersion: obj.ResourceVersion,
			Labels:          obj.Labels,
			Annotations:     annotations,
		},
		addresses:   obj.Status.Addresses,
		kubeletPort: int(obj.Status.DaemonEndpoints.KubeletEndpoint.Port),
	}
}

// GetObjectKind implements runtime.Object.
func (n *Node) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; a Node is never modified.
func (n *Node) DeepCopyObject() runtime.Object {
	c := *n
	return &c
}

// Addresses are the node's status addresses; read-only.
func (n *Node) Addresses() []corev1.NodeAddress { return n.addresses }

// KubeletPort is the port the node's status advertises for its kubelet, 0
// when none.
func (n *Node) KubeletPort() int { return n.kubeletPort }
