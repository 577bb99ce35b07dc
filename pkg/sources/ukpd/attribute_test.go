package ukpd

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func TestTagFor(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		name, key, value, want string
	}{
		{name: "plain", key: TagPod, value: "web-0", want: "k8s.io:pod=web-0"},
		{name: "allowed punctuation", key: TagNode, value: "a.b-c_d+e:f=g", want: "kraftlet:node=a.b-c_d+e:f=g"},
		{name: "sanitised", key: TagPod, value: "a b/c\u00e9\x00", want: "k8s.io:pod=a_b_c__"},
		{name: "cut", key: TagPod, value: long, want: "k8s.io:pod=" + long[:MaxTagBytes-len("k8s.io:pod=")]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TagFor(tc.key, tc.value)
			if got != tc.want {
				t.Errorf("TagFor(%q, %q) = %q, want %q", tc.key, tc.value, got, tc.want)
			}
			// The fake kraftlet tags the same way.
			if fake := fakeukpd.KraftletTag(tc.key, tc.value); fake != got {
				t.Errorf("fakeukpd.KraftletTag = %q, TagFor = %q", fake, got)
			}
		})
	}
}

func TestParseTags(t *testing.T) {
	tests := []struct {
		name   string
		tags   []string
		want   tagRef
		wantOK bool
	}{
		{name: "all four", tags: []string{"production", "k8s.io:namespace=ns", "k8s.io:pod=p", "k8s.io:container=c", "kraftlet:node=n"}, wantOK: true,
			want: tagRef{namespace: "ns", pod: "p", container: "c", node: "n", podTag: "k8s.io:pod=p", nodeTag: "kraftlet:node=n"}},
		{name: "no node, value with equals", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=p=q", "k8s.io:container=c"}, wantOK: true,
			want: tagRef{namespace: "ns", pod: "p=q", container: "c", podTag: "k8s.io:pod=p=q"}},
		{name: "no tags"},
		{name: "no container", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=p"}},
		{name: "empty pod", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=", "k8s.io:container=c"}},
		{name: "two pods", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=p", "k8s.io:pod=q", "k8s.io:container=c"}},
		{name: "the same tag twice", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=p", "k8s.io:pod=p", "k8s.io:container=c"}, wantOK: true,
			want: tagRef{namespace: "ns", pod: "p", container: "c", podTag: "k8s.io:pod=p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := parseTags(tc.tags); ok != tc.wantOK {
				t.Fatalf("parseTags ok = %v, want %v", ok, tc.wantOK)
			} else if ok {
				checkDiff(t, "parseTags", tc.want, got, cmp.AllowUnexported(tagRef{}))
			}
		})
	}
}

func newPod(ns, name, node string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

// podLister is a pod cache of pods, trimmed as the server's cache trims
// them.
func podLister(t testing.TB, pods ...*corev1.Pod) podcache.Pods {
	t.Helper()
	idx := podcache.NewPodIndex()
	for _, p := range pods {
		idx.Set(podcache.NewPod(p))
	}
	return idx
}

func TestFindPod(t *testing.T) {
	prefix := strings.Repeat("x", 250)
	pods := podLister(t,
		newPod("ns", "web-0", "n1", "app"),
		newPod("ns", strings.Repeat("u", 253), "n1", "app"),
		newPod("ns", prefix+"-a", "n1", "app"),
		newPod("ns", prefix+"-b", "n1", "app"),
		newPod("other", "web-0", "n2", "app"),
	)
	ref := func(ns, pod string) tagRef {
		tag := TagFor(TagPod, pod)
		return tagRef{namespace: ns, pod: strings.TrimPrefix(tag, TagPod+"="), container: "app", podTag: tag}
	}
	tests := []struct {
		name       string
		ref        tagRef
		wantPod    string // namespace/name
		wantReason string
	}{
		{name: "exact", ref: ref("ns", "web-0"), wantPod: "ns/web-0"},
		{name: "namespace matters", ref: ref("other", "web-0"), wantPod: "other/web-0"},
		{name: "absent", ref: ref("ns", "web-1"), wantReason: ignoredPodNotFound},
		{name: "absent namespace", ref: ref("nope", "web-0"), wantReason: ignoredPodNotFound},
		{name: "cut name, one match", ref: ref("ns", strings.Repeat("u", 253)), wantPod: "ns/" + strings.Repeat("u", 253)},
		{name: "cut name, two matches", ref: ref("ns", prefix+"-a"), wantReason: ignoredAmbiguousPod},
		{name: "cut name, no match", ref: ref("ns", strings.Repeat("v", 253)), wantReason: ignoredPodNotFound},
	}
	finder := newPodFinder(pods)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, reason := finder.find(tc.ref)
			if reason != tc.wantReason {
				t.Fatalf("reason = %q, want %q", reason, tc.wantReason)
			}
			if tc.wantPod != "" && (pod == nil || pod.Namespace+"/"+pod.Name != tc.wantPod) {
				t.Errorf("pod = %v, want %s", pod, tc.wantPod)
			}
		})
	}
}

func TestNodeOf(t *testing.T) {
	long := strings.Repeat("n", 250)
	tests := []struct {
		name, nodeTag, specNode, want string
	}{
		{name: "tag", nodeTag: TagFor(TagNode, "kraftlet-a"), specNode: "kraftlet-a", want: "kraftlet-a"},
		{name: "tag wins over spec", nodeTag: TagFor(TagNode, "kraftlet-b"), specNode: "kraftlet-a", want: "kraftlet-b"},
		{name: "no tag", specNode: "kraftlet-a", want: "kraftlet-a"},
		{name: "cut tag names the spec node", nodeTag: TagFor(TagNode, long), specNode: long, want: long},
		{name: "nothing", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := tagRef{nodeTag: tc.nodeTag, node: strings.TrimPrefix(tc.nodeTag, TagNode+"=")}
			if got := nodeOf(ref, podcache.NewPod(newPod("ns", "p", tc.specNode))); got != tc.want {
				t.Errorf("nodeOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	// ukpd's clock runs 30 s ahead: its started_at never enters a span.
	started := t0.Add(-10*time.Second + 30*time.Second)
	prevAt := t0.Add(-15 * time.Second)
	prevPoint := sources.Point{Timestamp: prevAt.Add(-time.Second), StartTime: prevAt.Add(-time.Minute), CPUCoreNanos: 7e9, MemoryBytes: 1}
	running := func(count uint64, uptime time.Duration) *timeline {
		return &timeline{count: count, reported: started, state: stateRunning, uptime: uptime, hasUptime: true, arrival: prevAt, point: prevPoint, has: true}
	}
	standingBy := func(count uint64, uptime time.Duration) *timeline {
		tl := running(count, uptime)
		tl.state = stateStandby
		return tl
	}
	sample := func(count uint64, cpu uint64, uptime time.Duration) Sample {
		return Sample{StartCount: count, StartedAt: started, CPUCoreNanos: cpu, RSSBytes: 5, Uptime: uptime, HasUptime: true}
	}
	noUptime := func(s Sample) Sample {
		s.Uptime, s.HasUptime = 0, false
		return s
	}
	moved := func(s Sample) Sample {
		s.StartedAt = s.StartedAt.Add(time.Minute)
		return s
	}
	pt := func(at, start time.Time, cpu uint64) *sources.Point {
		return &sources.Point{Timestamp: at, StartTime: start, CPUCoreNanos: cpu, MemoryBytes: 5}
	}
	next := prevPoint.Timestamp.Add(15 * time.Second) // by the time between arrivals
	tests := []struct {
		name   string
		prev   *timeline
		sample Sample
		state  string
		want   *sources.Point // nil: nothing reported
	}{
		{name: "first sight of an instance that started once: the average since it started, by its uptime",
			sample: sample(1, 5e9, 10*time.Second), state: stateRunning, want: pt(t0, t0.Add(-10*time.Second), 5e9)},
		{name: "first sight after several starts: a baseline, no rate", sample: sample(3, 5e9, 10*time.Second), state: stateRunning, want: pt(t0, t0, 5e9)},
		{name: "first sight without uptime: a baseline, no rate", sample: noUptime(sample(1, 5e9, 0)), state: stateRunning, want: pt(t0, t0, 5e9)},
		{name: "same run: the timestamp advances by the uptime gained, not by the time between arrivals",
			prev: running(1, time.Minute), sample: sample(1, 9e9, time.Minute+14*time.Second), state: stateRunning,
			want: pt(prevPoint.Timestamp.Add(14*time.Second), prevPoint.StartTime, 9e9)},
		{name: "same run without uptime: by the time between arrivals", prev: running(1, time.Minute), sample: noUptime(sample(1, 9e9, 0)), state: stateRunning, want: pt(next, prevPoint.StartTime, 9e9)},
		{name: "standby: the counter stands still over the time between arrivals",
			prev: running(1, time.Minute), sample: sample(1, 7e9, time.Minute), state: stateStandby, want: pt(next, prevPoint.StartTime, 7e9)},
		{name: "a wake: the previous sample stands in for the start",
			prev: standingBy(1, time.Minute), sample: moved(sample(2, 1e9, time.Minute+5*time.Second)), state: stateRunning,
			want: pt(next, prevPoint.Timestamp, 1e9)},
		{name: "started_at moved, the counter did not go back: one series goes on",
			prev: running(1, time.Minute), sample: moved(sample(1, 9e9, time.Minute+15*time.Second)), state: stateRunning, want: pt(next, prevPoint.StartTime, 9e9)},
		{name: "a wake whose counter went on (cumulative over starts): the rate over the interval, asleep included",
			prev: standingBy(1, time.Minute), sample: moved(sample(2, 8e9, 5*time.Second)), state: stateRunning, want: pt(next, prevPoint.StartTime, 8e9)},
		{name: "start_count moved, started_at did not: still a new start",
			prev: running(1, time.Minute), sample: sample(2, 1e9, time.Minute+5*time.Second), state: stateRunning, want: pt(next, prevPoint.Timestamp, 1e9)},
		{name: "woken and back in standby between two scrapes",
			prev: standingBy(1, time.Minute), sample: sample(2, 1e9, time.Minute+5*time.Second), state: stateStandby, want: pt(next, prevPoint.Timestamp, 1e9)},
		{name: "draining: the previous point again", prev: running(1, time.Minute), sample: sample(1, 9e9, time.Minute+14*time.Second), state: stateDraining, want: &prevPoint},
		{name: "draining, first sight: nothing", sample: sample(1, 9e9, time.Minute), state: stateDraining},
		{name: "stopped: nothing", prev: running(1, time.Minute), sample: sample(1, 9e9, time.Minute), state: stateStopped},
		{name: "starting: nothing", prev: running(1, time.Minute), sample: sample(2, 0, time.Minute), state: "starting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := advance(tc.prev, tc.sample, tc.state, t0)
			var gotPoint *sources.Point
			if got.has {
				gotPoint = &got.point
			}
			checkDiff(t, "point", tc.want, gotPoint)
			if got.arrival != t0 || got.count != tc.sample.StartCount || got.state != tc.state {
				t.Errorf("timeline = %+v, want this sample's arrival, count and state", got)
			}
		})
	}
}

func TestPlausibleCPU(t *testing.T) {
	tests := []struct {
		name  string
		vcpus int
		s     Sample
		want  bool
	}{
		{name: "one vCPU busy", vcpus: 1, s: Sample{CPUCoreNanos: 10e9, Uptime: 10 * time.Second, HasUptime: true}, want: true},
		{name: "room for the VMM's threads", vcpus: 1, s: Sample{CPUCoreNanos: 21e9, Uptime: 10 * time.Second, HasUptime: true}, want: true},
		{name: "more than vCPUs + 1 over the uptime", vcpus: 1, s: Sample{CPUCoreNanos: 22e9, Uptime: 10 * time.Second, HasUptime: true}},
		{name: "no vCPUs reported", s: Sample{CPUCoreNanos: 1e15, Uptime: time.Second, HasUptime: true}, want: true},
		{name: "no uptime reported", vcpus: 1, s: Sample{CPUCoreNanos: 1e15}, want: true},
	}
	for _, tc := range tests {
		if got := plausibleCPU(&Instance{VCPUs: tc.vcpus}, tc.s); got != tc.want {
			t.Errorf("%s: plausibleCPU = %v, want %v", tc.name, got, tc.want)
		}
	}
}
