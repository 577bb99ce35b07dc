package podcache

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// A group as the LeaderWorkerSet controller builds it: LeaderWorkerSet
// "inf" in namespace ml, group 0, leader inf-0 of StatefulSet inf, worker
// inf-0-1 of StatefulSet inf-0, which the leader pod controls.
const (
	lwsNS        = "ml"
	lwsName      = "inf"
	leaderUID    = types.UID("uid-pod-inf-0")
	leaderSetUID = types.UID("uid-sts-inf")
	workerSetUID = types.UID("uid-sts-inf-0")
)

func controllerRef(apiVersion, kind, name string, uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
}

func setRef(name string, uid types.UID) *metav1.OwnerReference {
	return controllerRef("apps/v1", "StatefulSet", name, uid)
}

var (
	lwsRef       = controllerRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", lwsName, "uid-lws-inf")
	leaderPodRef = controllerRef("v1", "Pod", "inf-0", leaderUID)
)

// lwsAPIPod is an API pod of group 0 carrying the LeaderWorkerSet's labels,
// controlled by ref (none when nil).
func lwsAPIPod(name, worker string, uid types.UID, ref *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: lwsNS, Name: name, UID: uid, Labels: map[string]string{
		group.LabelName: lwsName, group.LabelGroupIndex: "0", group.LabelWorkerIndex: worker,
	}}}
	if ref != nil {
		p.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return p
}

func lwsPod(name, worker string, uid types.UID, ref *metav1.OwnerReference) *Pod {
	return NewPod(lwsAPIPod(name, worker, uid, ref))
}

// setMeta is a StatefulSet's metadata as the metadata client returns it,
// carrying the LeaderWorkerSet name label.
func setMeta(name string, uid types.UID, ref *metav1.OwnerReference) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: lwsNS, Name: name, UID: uid, Labels: map[string]string{group.LabelName: lwsName}},
	}
	if ref != nil {
		m.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return m
}

var (
	leader     = lwsPod("inf-0", "0", leaderUID, setRef("inf", leaderSetUID))
	worker     = lwsPod("inf-0-1", "1", "uid-pod-inf-0-1", setRef("inf-0", workerSetUID))
	leaderSet  = setMeta("inf", leaderSetUID, lwsRef)
	workerSet  = setMeta("inf-0", workerSetUID, leaderPodRef)
	groupOfInf = lwsNS + "/" + lwsName + "/0"
)

// TestMembership: only the pods the LeaderWorkerSet's StatefulSets control
// are members, and only its verified leader leads. Every case has a pod
// that the labels alone would let in.
func TestMembership(t *testing.T) {
	type metas = []*metav1.PartialObjectMetadata
	both := metas{leaderSet, workerSet}
	tests := []struct {
		name string
		pods []*Pod
		sets metas
		// deleted names a StatefulSet deleted after the pods were read
		// once.
		deleted string
		// wantGroup and wantLeads are empty when nil.
		wantGroup, wantLeads []string
	}{
		{name: "verified leader; a labelled pod does not lead", pods: []*Pod{leader, lwsPod("impostor", "0", "uid-impostor", nil)},
			sets: metas{leaderSet}, wantGroup: []string{"ml/inf-0"}, wantLeads: []string{"inf-0"}},
		{name: "verified worker; a labelled worker is left out", pods: []*Pod{leader, worker, lwsPod("inf-0-2", "2", "uid-stray", nil)},
			sets: both, wantGroup: []string{"ml/inf-0", "ml/inf-0-1"}, wantLeads: []string{"inf-0"}},
		{name: "labelled pods with no controller", pods: []*Pod{lwsPod("inf-0", "0", leaderUID, nil), lwsPod("inf-0-1", "1", "uid-w", nil)}, sets: both},
		{name: "worker's controller names the right StatefulSet with the wrong UID",
			pods: []*Pod{leader, worker, lwsPod("inf-0-2", "2", "uid-w2", setRef("inf-0", "uid-forged"))},
			sets: both, wantGroup: []string{"ml/inf-0", "ml/inf-0-1"}, wantLeads: []string{"inf-0"}},
		{name: "leader's controller names the right StatefulSet with the wrong UID",
			pods: []*Pod{lwsPod("inf-0", "0", leaderUID, setRef("inf", "uid-forged")), worker}, sets: both},
		{name: "a leader-labelled pod not named for its group index", pods: []*Pod{lwsPod("inf-7", "0", "uid-7", setRef("inf", leaderSetUID))}, sets: metas{leaderSet}},
		{name: "worker StatefulSet controlled by another pod", pods: []*Pod{leader, worker},
			sets:      metas{leaderSet, setMeta("inf-0", workerSetUID, controllerRef("v1", "Pod", "inf-0", "uid-earlier-inf-0"))},
			wantGroup: []string{"ml/inf-0"}, wantLeads: []string{"inf-0"}},
		{name: "leader StatefulSet controlled by a Deployment", pods: []*Pod{leader, worker},
			sets: metas{setMeta("inf", leaderSetUID, controllerRef("apps/v1", "Deployment", "inf", "uid-d")), workerSet}},
		{name: "leader StatefulSet controlled by a LeaderWorkerSet of another API group", pods: []*Pod{leader, worker},
			sets: metas{setMeta("inf", leaderSetUID, controllerRef("example.com/v1", "LeaderWorkerSet", "inf", "uid-x")), workerSet}},
		{name: "leader StatefulSet with no controller", pods: []*Pod{leader, worker}, sets: metas{setMeta("inf", leaderSetUID, nil), workerSet}},
		{name: "worker StatefulSet deleted", pods: []*Pod{leader, worker}, sets: both, deleted: "inf-0", wantGroup: []string{"ml/inf-0"}, wantLeads: []string{"inf-0"}},
		{name: "leader StatefulSet deleted", pods: []*Pod{leader, worker}, sets: both, deleted: "inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sets := newStatefulSets()
			for _, m := range tc.sets {
				sets.set(newStatefulSet(m))
			}
			x := newPodIndex(sets)
			for _, p := range tc.pods {
				x.Set(p)
			}
			if tc.deleted != "" {
				x.Group(groupOfInf) // read before the deletion too
				sets.delete(lwsNS, tc.deleted)
			}
			checkDiff(t, "Group", append([]string{}, tc.wantGroup...), keys(x.Group(groupOfInf)))
			leads := []string{}
			for _, p := range tc.pods {
				if x.Leads(p) {
					leads = append(leads, p.Name)
				}
			}
			checkDiff(t, "Leads", append([]string{}, tc.wantLeads...), leads)
		})
	}
}

// TestUnverifiedCountedOnce: a pod left out is counted once, however
// often its group is read, and again only as a new pod.
func TestUnverifiedCountedOnce(t *testing.T) {
	RegisterMetrics()
	before, err := testutil.GetCounterMetricValue(unverifiedPods)
	must(t, err)
	counted := func() float64 {
		v, err := testutil.GetCounterMetricValue(unverifiedPods)
		must(t, err)
		return v - before
	}
	sets := newStatefulSets()
	sets.set(newStatefulSet(leaderSet))
	x := newPodIndex(sets)
	impostor := lwsPod("impostor", "0", "uid-impostor", nil)
	for _, p := range []*Pod{leader, lwsPod("inf-0-2", "2", "uid-stray", nil), impostor} {
		x.Set(p)
	}
	for range 3 {
		x.Group(groupOfInf)
		x.Leads(impostor)
	}
	// The same pod, updated: still the same pod.
	x.Set(lwsPod("inf-0-2", "2", "uid-stray", nil))
	x.Group(groupOfInf)
	if got := counted(); got != 2 {
		t.Errorf("%v pods counted, want 2", got)
	}
	// Deleted and made again: a new pod.
	x.Delete(lwsNS, "impostor")
	x.Set(lwsPod("impostor", "0", "uid-impostor-2", nil))
	x.Group(groupOfInf)
	if got := counted(); got != 3 {
		t.Errorf("%v pods counted after a new one, want 3", got)
	}
}

// TestNewPodIndexDoesNotVerify: the index for tests takes groups from
// labels, as pkg/provider's tests rely on.
func TestNewPodIndexDoesNotVerify(t *testing.T) {
	x := NewPodIndex()
	impostor := lwsPod("impostor", "0", "uid-impostor", nil)
	x.Set(impostor)
	if !x.Leads(impostor) || len(x.Group(groupOfInf)) != 1 {
		t.Error("an index from NewPodIndex verified membership")
	}
}

// TestCacheVerifiesMembership runs the informers against fake clients:
// the StatefulSets' metadata is watched, the pods are verified against
// it, and a StatefulSet's deletion takes its pods out of the group.
func TestCacheVerifiesMembership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kube := fake.NewClientset(
		lwsAPIPod("inf-0", "0", leaderUID, setRef("inf", leaderSetUID)),
		lwsAPIPod("inf-0-1", "1", "uid-pod-inf-0-1", setRef("inf-0", workerSetUID)),
		lwsAPIPod("impostor", "0", "uid-impostor", nil),
	)
	unlabelled := setMeta("db", "uid-sts-db", nil)
	unlabelled.Labels = nil
	scheme := metadatafake.NewTestScheme()
	must(t, metav1.AddMetaToScheme(scheme))
	meta := metadatafake.NewSimpleMetadataClient(scheme, []runtime.Object{leaderSet, workerSet, unlabelled}...)
	c, err := New(kube, meta)
	must(t, err)
	defer func() {
		cancel() // the informers stop when Start's context ends
		c.Shutdown()
	}()
	must(t, c.Start(ctx))

	checkDiff(t, "Group", []string{"ml/inf-0", "ml/inf-0-1"}, keys(c.Pods().Group(groupOfInf)))
	if impostor, _ := c.Pods().Pod(lwsNS, "impostor"); impostor == nil || c.Pods().Leads(impostor) {
		t.Errorf("impostor %v leads its group", impostor)
	}
	if c.pods.sets.get(lwsNS, "db") != nil {
		t.Error("a StatefulSet without the LeaderWorkerSet label is cached")
	}
	// Known by its leader StatefulSet, whatever its pods; the worker
	// StatefulSet, controlled by a pod, names no LeaderWorkerSet.
	for name, want := range map[string]bool{"inf": true, "inf-0": false, "db": false, "ghost": false} {
		if got := c.Pods().LeaderWorkerSet(lwsNS, name); got != want {
			t.Errorf("LeaderWorkerSet(%s) = %v, want %v", name, got, want)
		}
	}
	if NewPodIndex().LeaderWorkerSet(lwsNS, "inf") {
		t.Error("an index that does not verify knows a LeaderWorkerSet")
	}

	version := c.Pods().Version(lwsNS)
	must(t, meta.Resource(statefulSetsResource).Namespace(lwsNS).Delete(ctx, "inf-0", metav1.DeleteOptions{}))
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(c.Pods().Group(groupOfInf)) == 1, nil
	})
	if err != nil {
		t.Errorf("after the worker StatefulSet was deleted, Group = %v: %v", keys(c.Pods().Group(groupOfInf)), err)
	}
	if c.Pods().Version(lwsNS) == version {
		t.Error("the namespace's version stayed as its groups changed")
	}
}

// TestStatefulSetChanges: only a change of what verification reads moves
// a namespace's version on.
func TestStatefulSetChanges(t *testing.T) {
	sets := newStatefulSets()
	x := newPodIndex(sets)
	x.Set(leader)
	h := statefulSetHandler(sets, x)
	moved := func(do func()) bool {
		before := x.Version(lwsNS)
		do()
		return x.Version(lwsNS) != before
	}
	status := leaderSet.DeepCopy()
	status.ResourceVersion = "2"
	otherOwner := leaderSet.DeepCopy()
	otherOwner.OwnerReferences[0].UID = "uid-lws-inf-2"
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"added", func() { h.OnAdd(newStatefulSet(leaderSet), false) }, true},
		{"status update", func() { h.OnUpdate(nil, newStatefulSet(status)) }, false},
		{"controller changed", func() { h.OnUpdate(nil, newStatefulSet(otherOwner)) }, true},
		{"deleted", func() { h.OnDelete(newStatefulSet(otherOwner)) }, true},
		{"deleted again", func() { h.OnDelete(newStatefulSet(otherOwner)) }, false},
	}
	for _, s := range steps {
		if got := moved(s.do); got != s.want {
			t.Errorf("%s: version moved %v, want %v", s.name, got, s.want)
		}
	}
}
