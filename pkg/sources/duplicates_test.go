package sources

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestDropDuplicatePods(t *testing.T) {
	pod := func(name string, containers ...string) PodPoint {
		p := PodPoint{Namespace: "ns", Name: name}
		for _, c := range containers {
			p.Containers = append(p.Containers, ContainerPoint{Name: c})
		}
		return p
	}
	names := func(ps []PodPoint) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	tests := []struct {
		name           string
		in             []PodPoint
		want, problems []string
	}{
		{name: "none", in: nil, want: nil},
		{name: "one", in: []PodPoint{pod("a", "c")}, want: []string{"a"}},
		{name: "distinct", in: []PodPoint{pod("a", "c"), pod("b", "c", "d")}, want: []string{"a", "b"}},
		{
			name: "every copy of a repeated pod goes",
			in:   []PodPoint{pod("a", "c"), pod("b", "c"), pod("a", "c"), pod("c", "c"), pod("a", "c")},
			want: []string{"b", "c"}, problems: []string{"pod ns/a: listed 3 times"},
		},
		{name: "a repeated container costs its pod", in: []PodPoint{pod("a", "c", "d", "c"), pod("b", "c")}, want: []string{"b"}, problems: []string{`pod ns/a: container "c" listed twice`}},
		{name: "same name in another namespace is another pod", in: []PodPoint{pod("a", "c"), {Namespace: "other", Name: "a", Containers: []ContainerPoint{{Name: "c"}}}}, want: []string{"a", "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := DropDuplicatePods(tc.in)
			if !slices.Equal(names(got), tc.want) {
				t.Errorf("kept %v, want %v", names(got), tc.want)
			}
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if fmt.Sprint(msgs) != fmt.Sprint(tc.problems) {
				t.Errorf("problems %s, want %s", strings.Join(msgs, "; "), strings.Join(tc.problems, "; "))
			}
		})
	}
}

func containers(n int) []ContainerPoint {
	cs := make([]ContainerPoint, n)
	for i := range cs {
		cs[i].Name = fmt.Sprintf("container-%d", i)
	}
	return cs
}

// Both ways find a repeat wherever it stands, on either side of smallPod.
func TestRepeatedContainer(t *testing.T) {
	for _, n := range []int{2, smallPod, smallPod + 1, 1000} {
		for _, at := range []int{1, n / 2, n - 1} {
			cs := containers(n)
			if got := repeatedContainer(cs); got != "" {
				t.Fatalf("%d distinct containers: repeated %q", n, got)
			}
			cs[at].Name = cs[at-1].Name
			if got := repeatedContainer(cs); got != cs[at].Name {
				t.Errorf("%d containers, repeat at %d: got %q, want %q", n, at, got, cs[at].Name)
			}
		}
	}
}

// BenchmarkRepeatedContainer compares the two ways on pods of no repeat
// (the common case and the worst), to place smallPod, and times a hostile
// pod of 90k containers, which must cost milliseconds, not seconds.
func BenchmarkRepeatedContainer(b *testing.B) {
	for _, n := range []int{4, 8, 16, 32, 64} {
		cs := containers(n)
		b.Run(fmt.Sprintf("pairs/containers=%d", n), func(b *testing.B) {
			for b.Loop() {
				repeatedByPairs(cs)
			}
		})
		b.Run(fmt.Sprintf("set/containers=%d", n), func(b *testing.B) {
			for b.Loop() {
				repeatedBySet(cs)
			}
		})
	}
	cs := containers(90_000)
	b.Run("hostile/containers=90000", func(b *testing.B) {
		for b.Loop() {
			repeatedContainer(cs)
		}
	})
}
