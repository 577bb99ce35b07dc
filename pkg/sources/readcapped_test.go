package sources

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadCappedTo(t *testing.T) {
	broken := errors.New("connection reset by peer")
	cases := []struct {
		name             string
		body             io.Reader
		max              int64
		want, wantReason string
	}{
		{name: "under the cap", body: strings.NewReader("abc"), max: 3, want: "abc"},
		{name: "no cap", body: strings.NewReader(strings.Repeat("x", 5000)), want: strings.Repeat("x", 5000)},
		{name: "over the cap", body: strings.NewReader("abcd"), max: 3, wantReason: ReasonTooLarge},
		{name: "broken body", body: iotest.TimeoutReader(strings.NewReader(strings.Repeat("x", 4096))), wantReason: ReasonConnection},
		{name: "reset", body: io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(broken)), wantReason: ReasonConnection},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Twice: the second read gets the first one's buffer back.
			for range 2 {
				var got string
				err := ReadCappedTo(tc.body, tc.max, func(body []byte) error {
					got = string(body)
					return nil
				})
				if tc.wantReason != "" {
					if r := Reason(err); r != tc.wantReason {
						t.Fatalf("error %v with reason %q, want reason %q", err, r, tc.wantReason)
					}
					return
				}
				if err != nil || got != tc.want {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(got), err, len(tc.want))
				}
				tc.body = strings.NewReader(tc.want)
			}
		})
	}
}

// BenchmarkReadBody reads a Summary-sized body (33 KB) as a scrape does.
func BenchmarkReadBody(b *testing.B) {
	body := strings.Repeat("x", 33<<10)
	b.Run("ReadAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.ReadAll(io.LimitReader(strings.NewReader(body), 10<<20)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadCappedTo", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ReadCappedTo(strings.NewReader(body), 10<<20, func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
