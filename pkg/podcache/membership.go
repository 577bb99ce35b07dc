package podcache

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// Group membership is verified by controller reference, not taken from
// the group labels, which anyone who may create a pod in the namespace can
// set. As the LeaderWorkerSet controller builds a group
// (kubernetes-sigs/lws, leaderworkerset_controller.go and
// pod_controller.go):
//
//   - the leader StatefulSet is named after the LeaderWorkerSet and is
//     controlled by it; its pods, the leaders, are named <lws>-<group index>;
//   - each group's worker StatefulSet is named after the group's leader pod
//     and is controlled by that pod; its pods, the workers, are named
//     <leader>-<worker index>;
//   - every pod is controlled by its StatefulSet.
//
// A leader is verified when its controller is the StatefulSet of its
// LeaderWorkerSet's name, with the UID the cache holds for it, and that
// StatefulSet's controller is a LeaderWorkerSet of that name. The
// LeaderWorkerSet's UID is not checked: that would need a watch on
// LeaderWorkerSet objects, which this server does not hold; the kind, API
// group and name are. A worker is verified when its group has a verified
// leader and its controller is the StatefulSet named after that leader,
// with the UID the cache holds for it, whose controller is the leader pod
// itself (kind Pod, the leader's name and UID).
//
// Names are checked too, as the StatefulSet controller gives them: pod
// names are unique in a namespace, so a pod that copies a controller
// reference cannot take a slot that the StatefulSet's own pod holds.
// Copying a controller reference takes its UID, which whoever may read
// the group's pods or StatefulSets can learn: verification keeps out
// pods that only carry the labels, not such a copy.
const (
	lwsGroup        = "leaderworkerset.x-k8s.io"
	lwsKind         = "LeaderWorkerSet"
	statefulSetKind = "StatefulSet"
	podKind         = "Pod"
	coreGroup       = ""
)

var (
	unverifiedPods = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "lws",
		Name:      "unverified_pods_total",
		Help: "Pods carrying LeaderWorkerSet group labels that were left out of their group because no " +
			"StatefulSet of the LeaderWorkerSet controls them, counted once per pod. Includes the workers " +
			"of a group whose leader is gone or was replaced, until the LeaderWorkerSet controller recreates them.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// RegisterMetrics registers the pod cache's self-metrics; safe to call
// twice. New calls it.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(unverifiedPods) })
}

// Leads says whether p is its LeaderWorkerSet group's leader: it carries
// the leader's labels (Pod.Leader) and, on an index that verifies (every
// Cache's), the LeaderWorkerSet's leader StatefulSet controls it. Only a
// pod for which Leads is true may report its group's usage or values.
// Cheap: a few map look-ups, no allocation. Safe for concurrent use.
func (x *PodIndex) Leads(p *Pod) bool {
	if !p.leader {
		return false
	}
	if x.sets == nil {
		return true
	}
	if x.sets.leads(p) {
		return true
	}
	x.unverified.note(p)
	return false
}

// verified returns the members of a group that verification admits: the
// verified leader and the workers it controls; none when the group has no
// verified leader. The others are noted.
func (x *PodIndex) verified(members []*Pod) []*Pod {
	var leader *Pod
	for _, p := range members {
		if p.leader && x.sets.leads(p) {
			leader = p // pod names are unique: at most one can pass
			break
		}
	}
	out := make([]*Pod, 0, len(members))
	for _, p := range members {
		if p == leader || (leader != nil && x.sets.works(p, leader)) {
			out = append(out, p)
			continue
		}
		x.unverified.note(p)
	}
	return out
}

// leads says whether p, labelled as a leader, is a pod of its
// LeaderWorkerSet's leader StatefulSet.
func (x *statefulSets) leads(p *Pod) bool {
	lws, index := p.Labels[group.LabelName], p.Labels[group.LabelGroupIndex]
	if !ordinalOf(p.Name, lws, index) {
		return false
	}
	s := x.controllerOf(p, lws)
	return s != nil && s.controller != nil && s.controller.Group == lwsGroup &&
		s.controller.Kind == lwsKind && s.controller.Name == lws
}

// works says whether p is a pod of the worker StatefulSet of leader, a
// verified leader of p's group.
func (x *statefulSets) works(p, leader *Pod) bool {
	if p.leader || !ordinalOf(p.Name, leader.Name, p.Labels[group.LabelWorkerIndex]) {
		return false
	}
	s := x.controllerOf(p, leader.Name)
	return s != nil && s.controller != nil && s.controller.Group == coreGroup &&
		s.controller.Kind == podKind && s.controller.Name == leader.Name && s.controller.UID == leader.UID
}

// controllerOf returns the StatefulSet named name that controls p: p's
// controller reference names it and carries its UID. nil when p has no
// such controller or no such StatefulSet is cached.
func (x *statefulSets) controllerOf(p *Pod, name string) *statefulSet {
	ref := p.controller
	if ref == nil || ref.Kind != statefulSetKind || ref.Name != name || ref.UID == "" {
		return nil
	}
	s := x.get(p.Namespace, name)
	if s == nil || s.UID != ref.UID {
		return nil
	}
	return s
}

// ordinalOf says whether name is the name the StatefulSet controller
// gives to pod ordinal of the StatefulSet set: set-ordinal. No
// allocation. The LWS pod webhook sets a worker's worker-index label from
// that ordinal (kubernetes-sigs/lws pkg/webhooks/pod_webhook.go, with
// statefulsetutils.GetParentNameAndOrdinal), and the worker StatefulSet's
// ordinals start at 1 (pkg/controllers/pod_controller.go).
func ordinalOf(name, set, ordinal string) bool {
	return ordinal != "" && len(name) == len(set)+1+len(ordinal) &&
		strings.HasPrefix(name, set) && name[len(set)] == '-' && strings.HasSuffix(name, ordinal)
}

// unverifiedSet remembers the pods that were found unverified, so each is
// counted and logged once however often it is read. A pod is forgotten
// when it leaves the index, so the set is bounded by the cache itself.
type unverifiedSet struct {
	mu   sync.Mutex
	uids map[types.UID]struct{}
}

// note counts and logs p the first time it is found unverified.
func (u *unverifiedSet) note(p *Pod) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, seen := u.uids[p.UID]; seen {
		return
	}
	if u.uids == nil {
		u.uids = map[types.UID]struct{}{}
	}
	u.uids[p.UID] = struct{}{}
	unverifiedPods.Inc()
	key, _ := p.GroupKey()
	klog.V(2).InfoS("Pod carries LeaderWorkerSet group labels but is not controlled by the LeaderWorkerSet's StatefulSets; left out of its group",
		"pod", klog.KObj(p), "group", key, "leaderLabel", p.leader)
}

// forget drops p, which left the index.
func (u *unverifiedSet) forget(uid types.UID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.uids, uid)
}
