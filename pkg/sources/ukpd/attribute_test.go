package ukpd

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
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
		{
			name:   "all four",
			tags:   []string{"production", "k8s.io:namespace=ns", "k8s.io:pod=p", "k8s.io:container=c", "kraftlet:node=n"},
			want:   tagRef{namespace: "ns", pod: "p", container: "c", node: "n", podTag: "k8s.io:pod=p", nodeTag: "kraftlet:node=n"},
			wantOK: true,
		},
		{
			name:   "no node, value with equals",
			tags:   []string{"k8s.io:namespace=ns", "k8s.io:pod=p=q", "k8s.io:container=c"},
			want:   tagRef{namespace: "ns", pod: "p=q", container: "c", podTag: "k8s.io:pod=p=q"},
			wantOK: true,
		},
		{name: "no tags"},
		{name: "no container", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=p"}},
		{name: "empty pod", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=", "k8s.io:container=c"}},
		{name: "two pods", tags: []string{"k8s.io:namespace=ns", "k8s.io:pod=p", "k8s.io:pod=q", "k8s.io:container=c"}},
		{
			name:   "the same tag twice",
			tags:   []string{"k8s.io:namespace=ns", "k8s.io:pod=p", "k8s.io:pod=p", "k8s.io:container=c"},
			want:   tagRef{namespace: "ns", pod: "p", container: "c", podTag: "k8s.io:pod=p"},
			wantOK: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseTags(tc.tags)
			if ok != tc.wantOK {
				t.Fatalf("parseTags ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(tagRef{})); diff != "" {
				t.Errorf("parseTags (-want +got):\n%s", diff)
			}
		})
	}
}

func newPod(ns, name, node string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
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
