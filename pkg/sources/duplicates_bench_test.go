package sources

import (
	"fmt"
	"testing"
)

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
