package kubelet

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// The kubelet writes /metrics/resource with its registry's encoder, always
// in one form: "# HELP" and "# TYPE" lines, then one line a series,
// name{label="value",...} value [timestamp], single spaces, no escapes.
// readResourceText reads every line of that form itself and keeps the series
// of the families DecodeResource uses; anything else makes it give up, and expfmt
// reads the whole text instead (parseResource). So the text is always read
// as expfmt reads it, at a fraction of the cost (the package doc has the
// figures). FuzzResourceReaderMatchesExpfmt holds the reader to expfmt:
// whatever text it reads, expfmt reads too, to the same series.
//
// Where the reader gives up, it is on what expfmt reads differently from
// the plain form, or refuses: a line that begins with a blank or '{', blanks
// other than the single space before the value and the timestamp, an escape
// in a label value (a HELP text may hold expfmt's: kwok's ends in \n), a
// quoted name, an empty or trailing-comma label set, a repeated or reserved
// label name, a HELP or TYPE line not in the form above or repeated, a TYPE
// after samples or other than counter, gauge or untyped, a value or
// timestamp strconv does not take, text after the last newline.

// resFamily indexes the families DecodeResource reads.
type resFamily int

const (
	famNodeCPU resFamily = iota
	famNodeMemory
	famContainerCPU
	famContainerMemory
	famContainerStart
	famScrapeError
	numResFamilies
)

var resFamilyNames = [numResFamilies]string{resNodeCPU, resNodeMemory, resContainerCPU, resContainerMemory, resContainerStart, resScrapeError}

// resSeries is one series of a family DecodeResource reads: its pod labels
// ("" when absent), its value and its timestamp, if any.
type resSeries struct {
	namespace, pod, container string
	value                     float64
	ms                        int64
	timed                     bool
}

// resSeriesSet is every series of the families DecodeResource reads, each
// family's in the order of the text.
type resSeriesSet [numResFamilies][]resSeries

// textFamily is what the text said of one family so far.
type textFamily struct {
	name          string
	help, typed   bool // a HELP line; a TYPE line or a sample
	wanted        resFamily
	wantedIsValid bool
}

// resourceTextReader reads one text.
type resourceTextReader struct {
	set      resSeriesSet
	families []textFamily
	// strs holds each label value read once: a pod's namespace and name
	// stand in a series of each family and container.
	strs map[string]string
}

// readResourceText reads body if it is all in the kubelet's form (above);
// ok is false otherwise.
func readResourceText(body []byte) (set *resSeriesSet, ok bool) {
	r := resourceTextReader{families: make([]textFamily, 0, 16), strs: map[string]string{}}
	for len(body) > 0 {
		line, rest, found := bytes.Cut(body, []byte{'\n'})
		if !found && len(bytes.Trim(line, " \t")) > 0 {
			return nil, false // expfmt: unexpected end of input
		}
		body = rest
		if !r.line(line) {
			return nil, false
		}
	}
	return &r.set, true
}

// line reads one line, without its newline.
func (r *resourceTextReader) line(line []byte) bool {
	switch {
	case len(bytes.Trim(line, " \t")) == 0:
		return true // a blank line
	case line[0] == '#':
		return r.comment(line)
	}
	return r.sample(line)
}

// comment reads a HELP or TYPE line; any other comment is skipped.
func (r *resourceTextReader) comment(line []byte) bool {
	keyword, _, _ := bytes.Cut(bytes.TrimLeft(line[1:], " \t"), []byte{' '})
	keyword, _, _ = bytes.Cut(keyword, []byte{'\t'})
	isHelp := string(keyword) == "HELP"
	if !isHelp && string(keyword) != "TYPE" {
		return true
	}
	if !bytes.HasPrefix(line, []byte("# HELP ")) && !bytes.HasPrefix(line, []byte("# TYPE ")) {
		return false
	}
	rest := line[len("# HELP "):] // both keywords are four letters
	n := sources.MetricNameLen(rest)
	if n == 0 || n == len(rest) || rest[n] != ' ' {
		return false
	}
	text := rest[n+1:]
	if len(text) == 0 || text[0] == ' ' || text[0] == '\t' {
		return false
	}
	f := r.family(rest[:n])
	if isHelp {
		if f.help || !validHelpEscapes(text) {
			return false
		}
		f.help = true
		return true
	}
	if f.typed {
		return false
	}
	switch string(text) {
	case "counter", "gauge", "untyped":
		f.typed = true
		return true
	}
	return false
}

// sample reads a series' line.
func (r *resourceTextReader) sample(line []byte) bool {
	n := sources.MetricNameLen(line)
	if n == 0 || n == len(line) {
		return false
	}
	f := r.family(line[:n])
	f.typed = true
	var s resSeries
	rest := line[n:]
	if rest[0] == '{' {
		var ok bool
		if rest, ok = r.readLabels(rest[1:], &s, f.wantedIsValid); !ok {
			return false
		}
	}
	if len(rest) < 2 || rest[0] != ' ' {
		return false
	}
	value, ts, timed := rest[1:], []byte(nil), false
	if i := bytes.IndexByte(value, ' '); i >= 0 {
		value, ts, timed = value[:i], value[i+1:], true
	}
	if len(value) == 0 || bytes.ContainsAny(value, "pP_\t") {
		return false // expfmt's parseFloat refuses p, P and _
	}
	v, err := strconv.ParseFloat(string(value), 64)
	if err != nil {
		return false
	}
	s.value = v
	if timed {
		if len(ts) == 0 || bytes.ContainsAny(ts, " \t") {
			return false
		}
		if s.ms, err = strconv.ParseInt(string(ts), 10, 64); err != nil {
			return false
		}
		s.timed = true
	}
	if f.wantedIsValid {
		r.set[f.wanted] = append(r.set[f.wanted], s)
	}
	return true
}

// validHelpEscapes reports whether every backslash in a HELP text begins
// an escape expfmt takes: \\, \n or \".
func validHelpEscapes(text []byte) bool {
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			continue
		}
		if i++; i == len(text) || (text[i] != '\\' && text[i] != 'n' && text[i] != '"') {
			return false
		}
	}
	return true
}

// readLabels reads name="value",... up to and including '}' and returns
// what follows; keep says to keep the pod's labels in s.
func (r *resourceTextReader) readLabels(in []byte, s *resSeries, keep bool) ([]byte, bool) {
	var seen [8][]byte
	names := seen[:0]
	for {
		n := sources.LabelNameLen(in)
		if n == 0 || n == len(in) || in[n] != '=' {
			return nil, false
		}
		name := in[:n]
		if string(name) == "__name__" || len(names) == cap(seen) {
			return nil, false
		}
		for _, other := range names {
			if bytes.Equal(other, name) {
				return nil, false
			}
		}
		names = append(names, name)
		in = in[n+1:]
		if len(in) == 0 || in[0] != '"' {
			return nil, false
		}
		end := bytes.IndexByte(in[1:], '"')
		if end < 0 {
			return nil, false
		}
		value := in[1 : 1+end]
		if bytes.IndexByte(value, '\\') >= 0 || !utf8.Valid(value) {
			return nil, false
		}
		if keep {
			switch string(name) {
			case "namespace":
				s.namespace = r.str(value)
			case "pod":
				s.pod = r.str(value)
			case "container":
				s.container = r.str(value)
			}
		}
		in = in[2+end:]
		if len(in) == 0 {
			return nil, false
		}
		switch in[0] {
		case '}':
			return in[1:], true
		case ',':
			in = in[1:]
		default:
			return nil, false
		}
	}
}

// str is b as a string, one string for equal bytes.
func (r *resourceTextReader) str(b []byte) string {
	if v, ok := r.strs[string(b)]; ok {
		return v
	}
	v := string(b)
	r.strs[v] = v
	return v
}

// family returns the state of the family name, adding it when new.
func (r *resourceTextReader) family(name []byte) *textFamily {
	for i := range r.families {
		if r.families[i].name == string(name) {
			return &r.families[i]
		}
	}
	f := textFamily{name: string(name)}
	for i, w := range resFamilyNames {
		if w == f.name {
			f.wanted, f.wantedIsValid = resFamily(i), true
		}
	}
	r.families = append(r.families, f)
	return &r.families[len(r.families)-1]
}
