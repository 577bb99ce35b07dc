package ukpd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// The series of the Prometheus form that the source reads, each labelled
// with instance_uuid.
const (
	metricState      = "instance_state"
	metricStartCount = "instance_start_count"
	metricStartedAt  = "instance_started_at"
	metricCPU        = "instance_cpu_time_s"
	metricRSS        = "instance_rss_bytes"
	metricUptime     = "instance_uptime_s"
	labelUUID        = "instance_uuid"
)

// stateCodes are the values of instance_state, as its HELP line documents
// them.
var stateCodes = []string{"stopped", "starting", "running", "draining", "stopping", "standby", "template", "deleted"}

// Indices of the series read, in series.
const (
	idxState = iota
	idxStartCount
	idxStartedAt
	idxCPU
	idxRSS
	idxUptime
	numSeries
)

var seriesIndex = map[string]int{
	metricState: idxState, metricStartCount: idxStartCount, metricStartedAt: idxStartedAt,
	metricCPU: idxCPU, metricRSS: idxRSS, metricUptime: idxUptime,
}

// series is what the Prometheus form says of one instance.
type series struct {
	values [numSeries]float64
	have   [numSeries]bool
	line   [numSeries]int
}

// Bounds of what one Prometheus-form response may hold. ukpd writes one
// label per series; a line with many more, or more instances than the
// instance list may hold, can only be hostile or garbage, and is cut short
// rather than parsed to the end.
const (
	maxLabelsPerLine = 64
	maxLineBytes     = 4 << 20
	maxTextInstances = listPageSize * maxListPages
	// ctxCheckLines is how many lines are decoded between two looks at
	// the context.
	ctxCheckLines = 4096
)

// DecodeMetricsText decodes a GET /v1/instances/metrics response in the
// Prometheus text exposition format. It is an error, and no samples, when
// the body has malformed lines and not one well-formed sample. Otherwise a
// malformed line, a series without instance_uuid, a repeated series or an
// instance without CPU time or resident set is left out and named in the
// returned error, alongside the samples of all other instances.
//
// Its time is linear in the body's length and its memory bounded by the
// instances it keeps (docs/benchmarks.md has the figures).
func DecodeMetricsText(body []byte) ([]Sample, error) {
	return decodeMetricsText(context.Background(), body)
}

// decodeMetricsText is DecodeMetricsText that stops, with no samples, when
// ctx is done.
func decodeMetricsText(ctx context.Context, body []byte) ([]Sample, error) {
	var p problems
	parsed := 0
	byUUID := map[string]*series{}
	lineNo := 0
	for len(body) > 0 {
		lineNo++
		if lineNo%ctxCheckLines == 0 {
			if err := ctx.Err(); err != nil {
				return nil, sources.WithReason(sources.TransportReason(err), fmt.Errorf("decode instance metrics: %w", err))
			}
		}
		var raw []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			raw, body = body[:i], body[i+1:]
		} else {
			raw, body = body, nil
		}
		raw = bytes.TrimSuffix(raw, []byte{'\r'})
		if len(raw) > maxLineBytes {
			p.addf("line %d: longer than %d bytes", lineNo, maxLineBytes)
			continue
		}
		if !utf8.Valid(raw) || bytes.IndexByte(raw, 0) >= 0 {
			p.addf("line %d: not UTF-8 text", lineNo)
			continue
		}
		line := strings.TrimSpace(string(raw))
		if line == "" || line[0] == '#' {
			continue
		}
		name, uuid, value, err := parseSampleLine(line)
		if err != nil {
			p.addf("line %d: %w", lineNo, err)
			continue
		}
		parsed++
		idx, wanted := seriesIndex[name]
		if !wanted {
			continue
		}
		if uuid == "" {
			p.addf("line %d: %s has no %s label", lineNo, name, labelUUID)
			continue
		}
		s := byUUID[uuid]
		if s == nil {
			if len(byUUID) == maxTextInstances {
				p.addf("line %d: more than %d instances", lineNo, maxTextInstances)
				continue
			}
			s = &series{}
			byUUID[uuid] = s
		}
		if s.have[idx] {
			p.addf("line %d: %s of instance %q repeats line %d", lineNo, name, clip(uuid), s.line[idx])
			continue
		}
		s.values[idx], s.have[idx], s.line[idx] = value, true, lineNo
	}
	if parsed == 0 && p.n > 0 {
		return nil, sources.WithReason(sources.ReasonDecode,
			fmt.Errorf("decode instance metrics: no well-formed sample: %w", p.err("prometheus text")))
	}
	uuids := make([]string, 0, len(byUUID))
	for u := range byUUID {
		uuids = append(uuids, u)
	}
	slices.Sort(uuids)
	out := make([]Sample, 0, len(uuids))
	for _, u := range uuids {
		s, err := byUUID[u].sample(u)
		if err != nil {
			p.addf("instance %q: %w", clip(u), err)
			continue
		}
		out = append(out, s)
	}
	if len(uuids) > 0 && len(out) == 0 {
		// As in the JSON form: an answer none of whose instances could be
		// read fails, rather than store an empty scrape.
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode instance metrics: %w", p.err("instance metrics")))
	}
	return out, p.err("instance metrics")
}

func (s *series) sample(uuid string) (Sample, error) {
	cpu, rss := s.values[idxCPU], s.values[idxRSS]
	switch {
	case !s.have[idxCPU]:
		return Sample{}, errors.New("no " + metricCPU)
	case !s.have[idxRSS]:
		return Sample{}, errors.New("no " + metricRSS)
	case !(cpu >= 0 && cpu*1e9 <= maxCPUCoreNanos):
		return Sample{}, fmt.Errorf("%s %g is implausible", metricCPU, cpu)
	case !(rss >= 0 && rss <= maxRSSBytes):
		return Sample{}, fmt.Errorf("%s %g is implausible", metricRSS, rss)
	}
	out := Sample{UUID: uuid, CPUCoreNanos: uint64(math.Round(cpu * 1e9)), RSSBytes: uint64(math.Round(rss))}
	if i := idxStartCount; s.have[i] {
		v := s.values[i]
		if !(v >= 0 && v <= 1<<53 && v == math.Trunc(v)) {
			return Sample{}, fmt.Errorf("%s %g is not a count", metricStartCount, v)
		}
		out.StartCount = uint64(v)
	}
	if i := idxStartedAt; s.have[i] && s.values[i] != 0 {
		v := s.values[i]
		if !(v >= float64(minTime.Unix()) && v < 1<<40) {
			return Sample{}, fmt.Errorf("%s %g is implausible", metricStartedAt, v)
		}
		sec, frac := math.Modf(v)
		out.StartedAt = time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC()
	}
	if i := idxUptime; s.have[i] {
		v := s.values[i]
		if !(v >= 0 && v*1e3 <= maxUptimeMS) {
			return Sample{}, fmt.Errorf("%s %g is implausible", metricUptime, v)
		}
		out.Uptime, out.HasUptime = time.Duration(math.Round(v*1e3))*time.Millisecond, true
	}
	if i := idxState; s.have[i] {
		v := s.values[i]
		switch {
		case v >= 0 && v < float64(len(stateCodes)) && v == math.Trunc(v):
			out.State = stateCodes[int(v)]
		case v >= 0 && v < 1<<31 && v == math.Trunc(v):
			// A state this decoder does not know is not "running".
			out.State = "code-" + strconv.Itoa(int(v))
		default:
			return Sample{}, fmt.Errorf("%s %g is not a state code", metricState, v)
		}
	}
	return out, nil
}

// parseSampleLine parses `name{l="v",...} value [timestamp]` and returns
// the metric name, the value of its instance_uuid label ("" if none) and
// the value. It reads each byte of the line at most a fixed number of
// times, and gives up after maxLabelsPerLine labels.
func parseSampleLine(line string) (name, uuid string, value float64, err error) {
	i := sources.MetricNameLen(line)
	if i == 0 {
		return "", "", 0, errors.New("no metric name")
	}
	name, rest := line[:i], line[i:]
	rest = strings.TrimLeft(rest, " \t")
	if strings.HasPrefix(rest, "{") {
		uuid, rest, err = parseLabels(rest[1:])
		if err != nil {
			return "", "", 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return "", "", 0, fmt.Errorf("%s: want a value and an optional timestamp", name)
	}
	value, err = strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", "", 0, fmt.Errorf("%s: value %q is not a number", name, clip(fields[0]))
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return "", "", 0, fmt.Errorf("%s: timestamp %q is not an integer", name, clip(fields[1]))
		}
	}
	return name, uuid, value, nil
}

// parseLabels parses the label set after its opening brace and returns the
// value of instance_uuid and the text after the closing brace. A label
// given twice is an error; the check compares each name with those before
// it, at most maxLabelsPerLine of them, so it stays linear in the line.
func parseLabels(s string) (string, string, error) {
	var (
		uuid  string
		names [maxLabelsPerLine]string
	)
	for n := 0; ; n++ {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			return uuid, s[1:], nil
		}
		if n == maxLabelsPerLine {
			return "", "", fmt.Errorf("more than %d labels", maxLabelsPerLine)
		}
		i := sources.LabelNameLen(s)
		if i == 0 {
			return "", "", errors.New("malformed label set")
		}
		ln := s[:i]
		s = strings.TrimLeft(s[i:], " \t")
		if !strings.HasPrefix(s, "=") {
			return "", "", fmt.Errorf("label %s has no value", clip(ln))
		}
		s = strings.TrimLeft(s[1:], " \t")
		v, rest, err := parseQuoted(s)
		if err != nil {
			return "", "", fmt.Errorf("label %s: %w", clip(ln), err)
		}
		if slices.Contains(names[:n], ln) {
			return "", "", fmt.Errorf("label %s given twice", clip(ln))
		}
		names[n] = ln
		if ln == labelUUID {
			uuid = v
		}
		s = strings.TrimLeft(rest, " \t")
		switch {
		case strings.HasPrefix(s, ","):
			s = s[1:]
		case strings.HasPrefix(s, "}"):
		default:
			return "", "", errors.New("malformed label set")
		}
	}
}

// parseQuoted reads a double-quoted label value with the escapes \\, \" and
// \n.
func parseQuoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", errors.New("value is not quoted")
	}
	// Most values hold no escape: then the value is a part of s.
	if i := strings.IndexAny(s[1:], `"\\`); i >= 0 && s[1+i] == '"' {
		return s[1 : 1+i], s[2+i:], nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			i++
			if i == len(s) {
				return "", "", errors.New("unterminated value")
			}
			switch s[i] {
			case '\\', '"':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			default:
				return "", "", fmt.Errorf("unknown escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated value")
}
