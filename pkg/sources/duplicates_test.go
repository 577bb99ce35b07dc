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
