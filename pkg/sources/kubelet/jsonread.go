package kubelet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// reader walks a JSON document without reflection, for the handful of
// Summary fields the server reads. It validates everything it passes over,
// skipped values included, so it accepts exactly the documents
// encoding/json accepts, with two exceptions that only a broken kubelet
// would send and that it rejects: a field the server reads given twice in
// one object, and a key that differs from such a field only in case (which
// encoding/json would take for it).
type reader struct {
	data  []byte
	pos   int
	depth int

	// lastTime caches the last time literal parsed: a Summary repeats the
	// same sample time for most of its entries.
	lastTimeLit []byte
	lastTime    time.Time
}

// maxDepth is the deepest nesting accepted, as in encoding/json.
const maxDepth = 10000

// errStrict marks the rejections that encoding/json would not make.
var errStrict = errors.New("ambiguous field")

func (r *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", r.pos, fmt.Sprintf(format, args...))
}

func (r *reader) skipSpace() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (r *reader) peek() byte {
	r.skipSpace()
	if r.pos >= len(r.data) {
		return 0
	}
	return r.data[r.pos]
}

// end checks that nothing but white space follows.
func (r *reader) end() error {
	r.skipSpace()
	if r.pos < len(r.data) {
		return r.errorf("unexpected %q after the top-level value", r.data[r.pos])
	}
	return nil
}

// null consumes a null literal if one is next.
func (r *reader) null() (bool, error) {
	if r.peek() != 'n' {
		return false, nil
	}
	return true, r.literal("null")
}

func (r *reader) literal(lit string) error {
	if !bytes.HasPrefix(r.data[r.pos:], []byte(lit)) {
		return r.errorf("invalid literal, want %s", lit)
	}
	r.pos += len(lit)
	return nil
}

func (r *reader) open(c byte) error {
	if r.peek() != c {
		return r.errorf("%s", r.unexpected(c))
	}
	r.pos++
	r.depth++
	if r.depth > maxDepth {
		return r.errorf("nested deeper than %d", maxDepth)
	}
	return nil
}

func (r *reader) unexpected(want byte) string {
	if r.pos >= len(r.data) {
		return fmt.Sprintf("unexpected end of input, want %q", want)
	}
	return fmt.Sprintf("found %q, want %q", r.data[r.pos], want)
}

// object reads an object, calling member for each key with the reader at the
// key's value; member must consume the value. The key may alias the input.
func (r *reader) object(member func(key []byte) error) error {
	if err := r.open('{'); err != nil {
		return err
	}
	if r.peek() == '}' {
		r.pos++
		r.depth--
		return nil
	}
	for {
		if r.peek() != '"' {
			return r.errorf("%s", r.unexpected('"'))
		}
		key, err := r.stringBytes()
		if err != nil {
			return err
		}
		if r.peek() != ':' {
			return r.errorf("%s", r.unexpected(':'))
		}
		r.pos++
		if err := member(key); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.pos++
		case '}':
			r.pos++
			r.depth--
			return nil
		default:
			return r.errorf("%s", r.unexpected('}'))
		}
	}
}

// array reads an array, calling elem for each element with the reader at the
// element; elem must consume it.
func (r *reader) array(elem func(i int) error) error {
	if err := r.open('['); err != nil {
		return err
	}
	if r.peek() == ']' {
		r.pos++
		r.depth--
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.pos++
		case ']':
			r.pos++
			r.depth--
			return nil
		default:
			return r.errorf("%s", r.unexpected(']'))
		}
	}
}

// skip consumes any value, validating it.
func (r *reader) skip() error {
	switch c := r.peek(); {
	case c == '{':
		return r.object(func([]byte) error { return r.skip() })
	case c == '[':
		return r.array(func(int) error { return r.skip() })
	case c == '"':
		_, err := r.stringBytes()
		return err
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := r.number()
		return err
	case r.pos >= len(r.data):
		return r.errorf("unexpected end of input, want a value")
	default:
		return r.errorf("unexpected %q, want a value", c)
	}
}

// stringSpecial marks the bytes a string scan must stop at: the quote, the
// backslash, control characters and the start of multi-byte UTF-8.
var stringSpecial = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()

// stringLiteral consumes a string and returns it with its quotes, unescaped
// as written. plain says it holds only ASCII and no escapes.
func (r *reader) stringLiteral() (lit []byte, plain bool, err error) {
	d := r.data
	start := r.pos
	i := r.pos + 1 // past the opening quote
	plain = true
	for {
		for i < len(d) && !stringSpecial[d[i]] {
			i++
		}
		if i >= len(d) {
			r.pos = i
			return nil, false, r.errorf("unterminated string")
		}
		switch c := d[i]; {
		case c == '"':
			r.pos = i + 1
			return d[start:r.pos], plain, nil
		case c == '\\':
			plain = false
			if i+1 >= len(d) {
				r.pos = i
				return nil, false, r.errorf("unterminated escape")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex4(d[i+2:i+6]) {
					r.pos = i
					return nil, false, r.errorf("invalid \\u escape")
				}
				i += 6
			default:
				r.pos = i
				return nil, false, r.errorf("invalid escape %q", d[i+1])
			}
		case c < 0x20:
			r.pos = i
			return nil, false, r.errorf("control character %#x in string", c)
		default: // a byte of multi-byte UTF-8, or invalid
			plain = false
			i++
		}
	}
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// stringBytes consumes a string and returns its value. Plain ASCII, the
// usual case, aliases the input; escapes and other bytes take the standard
// library's rules (invalid UTF-8 becomes U+FFFD).
func (r *reader) stringBytes() ([]byte, error) {
	lit, plain, err := r.stringLiteral()
	if err != nil {
		return nil, err
	}
	if plain {
		return lit[1 : len(lit)-1], nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return nil, r.errorf("%v", err)
	}
	return []byte(s), nil
}

// str reads a string or null (which leaves *dst alone, as encoding/json
// does).
func (r *reader) str(dst *string) error { return r.strFrom(dst, nil) }

// strFrom is str, taking the string from seen when it is there: for fields
// whose few values repeat through a document.
func (r *reader) strFrom(dst *string, seen *recent) error {
	switch r.peek() {
	case '"':
		b, err := r.stringBytes()
		if err != nil {
			return err
		}
		if seen != nil {
			*dst = seen.intern(b)
		} else {
			*dst = string(b)
		}
		return nil
	case 'n':
		return r.literal("null")
	}
	return r.typeError("string")
}

func (r *reader) typeError(want string) error {
	if err := r.skip(); err != nil {
		return err
	}
	return r.errorf("value is not a %s", want)
}

// number consumes a number and returns its literal.
func (r *reader) number() ([]byte, error) {
	start := r.pos
	d := r.data
	i := r.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		r.pos = i
		return nil, r.errorf("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			r.pos = i
			return nil, r.errorf("invalid number: no digit after the decimal point")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			r.pos = i
			return nil, r.errorf("invalid number: no digit in the exponent")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	r.pos = i
	return d[start:i], nil
}

// uint reads a non-negative integer that fits 64 bits, or null.
func (r *reader) uint(dst *uint64, set *bool) error {
	switch c := r.peek(); {
	case c == 'n':
		return r.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		lit, err := r.number()
		if err != nil {
			return err
		}
		var v uint64
		for _, c := range lit {
			if c < '0' || c > '9' {
				return r.errorf("number %s is not a non-negative integer", lit)
			}
			d := uint64(c - '0')
			if v > (1<<64-1-d)/10 {
				return r.errorf("number %s overflows 64 bits", lit)
			}
			v = v*10 + d
		}
		*dst, *set = v, true
		return nil
	}
	return r.typeError("number")
}

// time reads a time string, or null: the string it spells (escapes read
// like any string's) in RFC 3339, by time.Time's rules.
func (r *reader) time(dst *time.Time) error {
	switch r.peek() {
	case 'n':
		return r.literal("null")
	case '"':
		lit, plain, err := r.stringLiteral()
		if err != nil {
			return err
		}
		if bytes.Equal(lit, r.lastTimeLit) {
			*dst = r.lastTime
			return nil
		}
		quoted := lit
		if !plain {
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				return r.errorf("%v", err)
			}
			quoted = []byte(`"` + s + `"`)
		}
		var t time.Time
		if err := t.UnmarshalJSON(quoted); err != nil {
			return r.errorf("%v", err)
		}
		r.lastTimeLit, r.lastTime, *dst = lit, t, t
		return nil
	}
	return r.typeError("time string")
}

// fields tracks which of an object's known fields were seen, to reject a
// field given twice or a key that only case tells from a known one.
type fields struct {
	names []string
	seen  uint32
}

// known reports which known field key is, or -1 for an unknown key.
func (f *fields) known(key []byte) (int, error) {
	for i, n := range f.names {
		if string(key) == n {
			if f.seen&(1<<i) != 0 {
				return 0, fmt.Errorf("%w: %q given twice", errStrict, n)
			}
			f.seen |= 1 << i
			return i, nil
		}
	}
	for _, n := range f.names {
		if foldEqual(key, n) {
			return 0, fmt.Errorf("%w: key %q differs from %q only in case", errStrict, key, n)
		}
	}
	return -1, nil
}

// foldEqual is case-insensitive equality with the Unicode folding
// encoding/json applies to keys.
func foldEqual(key []byte, name string) bool {
	// Folding can change a letter's length (ſ, K), so only a plain ASCII key
	// of another length is certainly different.
	if len(key) != len(name) && isASCII(key) {
		return false
	}
	return strings.EqualFold(string(key), name)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// recent holds the last few distinct values of a field that repeats within
// a document, such as a pod's namespace or a container's name, so that each
// is allocated once per document instead of once per pod. Comparing a
// []byte with a string does not allocate.
type recent struct {
	s    [8]string
	next int
}

func (t *recent) intern(b []byte) string {
	for _, s := range t.s {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	t.s[t.next] = s
	t.next = (t.next + 1) % len(t.s)
	return s
}
