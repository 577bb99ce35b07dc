package sources

import (
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 5, "short"},
		{"longer", 4, "long..."},
		{"a€b", 3, "a..."}, // '€' is 3 bytes: a cut inside it keeps none of it
		{"a€b", 4, "a€..."},
		{"€", 0, "..."},
		{"a\xffb", 2, "a\xff..."}, // an invalid byte is a rune of its own: Quote escapes it
	} {
		got := Clip(c.in, c.n)
		if got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if utf8.ValidString(c.in) && !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q: cut a rune", c.in, c.n, got)
		}
	}
}
