package ukpd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// Instance is an entry of GET /v1/instances, reduced to what attribution
// reads.
type Instance struct {
	UUID  string
	Name  string
	State string
	Tags  []string
	// VCPUs is the instance's vCPU count; 0 when not reported.
	VCPUs int
}

// Sample is one instance's entry of GET /v1/instances/metrics.
type Sample struct {
	// UUID identifies the instance; the JSON form may leave it out and give
	// only Name, the Prometheus form gives only the UUID.
	UUID string
	Name string
	// State is the instance state ("running", "standby", ...); empty when the
	// response did not say.
	State string
	// CPUCoreNanos is the CPU time consumed since the instance last started.
	CPUCoreNanos uint64
	// RSSBytes is the resident set of the instance's VMM.
	RSSBytes uint64
	// StartCount is how often the instance has started; 0 when not reported.
	StartCount uint64
	// StartedAt is when the instance last started, by ukpd's clock, in
	// whole seconds; zero when not reported.
	StartedAt time.Time
	// Uptime is ukpd's own count of the time the instance has run
	// (uptime_ms, instance_uptime_s); valid only when HasUptime.
	Uptime    time.Duration
	HasUptime bool
}

// Bounds beyond which a value can only be garbage.
const (
	maxRSSBytes     = 1 << 50 // 1 PiB
	maxCPUCoreNanos = 1 << 62 // about 146 core-years
	maxUptimeMS     = 1 << 42 // about 139 years
	// maxReported caps the problems named in one error.
	maxReported = 10
)

var minTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Response statuses of the platform API envelope.
const (
	statusSuccess        = "success"
	statusPartialSuccess = "partial_success"
	statusError          = "error"
	// statusFailure is not in the reference's enum, but some servers answer
	// it for a request that failed as a whole.
	statusFailure = "failure"
)

// envelope is the platform API's response wrapper:
// {"status": ..., "message": ..., "data": {"instances": [...]}, "errors": [...]}.
// The metrics reference describes its JSON as "an object with an instances
// array", so a bare {"instances": [...]} is read as well.
type envelope struct {
	Status    string            `json:"status"`
	Message   string            `json:"message"`
	Data      *envelopeData     `json:"data"`
	Instances []json.RawMessage `json:"instances"`
}

type envelopeData struct {
	Instances []json.RawMessage `json:"instances"`
}

// entries unwraps the envelope and returns its instances, one raw message
// each, so that a malformed entry costs only itself.
func entries(what string, body []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode %s: not a JSON object", what))
	}
	var env envelope
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode %s: %w", what, err))
	}
	switch env.Status {
	case "", statusSuccess, statusPartialSuccess:
	case statusError, statusFailure:
		msg := env.Message
		if msg == "" {
			msg = "no message"
		}
		return nil, sources.WithReason(sources.ReasonHTTPStatus, fmt.Errorf("%s: API answered status %s: %s", what, env.Status, clip(msg)))
	default:
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode %s: unknown status %q", what, clip(env.Status)))
	}
	list := env.Instances
	if env.Data != nil && env.Data.Instances != nil {
		list = env.Data.Instances
	}
	// An empty list may be left out altogether.
	if list == nil {
		list = []json.RawMessage{}
	}
	return list, nil
}

// item holds the per-item envelope fields every entry carries.
type item struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	UUID    string `json:"uuid"`
	Name    string `json:"name"`
}

func (it *item) check() error {
	if it.Status == statusError {
		msg := it.Message
		if msg == "" {
			msg = "no message"
		}
		return fmt.Errorf("status error: %s", clip(msg))
	}
	return nil
}

func (it *item) label(i int) string {
	switch {
	case it.UUID != "":
		return fmt.Sprintf("instance %q", clip(it.UUID))
	case it.Name != "":
		return fmt.Sprintf("instance named %q", clip(it.Name))
	}
	return fmt.Sprintf("instance #%d", i)
}

// DecodeInstances decodes a GET /v1/instances response. A body that is not
// the JSON envelope is an error and no list. An entry that is malformed,
// reports status error, has no UUID or repeats one is left out and named in
// the returned error, alongside the list of all other entries.
func DecodeInstances(body []byte) ([]Instance, error) {
	raw, err := entries("instance list", body)
	if err != nil {
		return nil, err
	}
	var p problems
	out := make([]Instance, 0, len(raw))
	seen := make(map[string]struct{}, len(raw))
	for i, r := range raw {
		var w struct {
			item
			State string   `json:"state"`
			Tags  []string `json:"tags"`
			VCPUs int      `json:"vcpus"`
		}
		if err := json.Unmarshal(r, &w); err != nil {
			p.add(fmt.Errorf("instance #%d: %w", i, err))
			continue
		}
		if err := w.check(); err != nil {
			p.add(fmt.Errorf("%s: %w", w.label(i), err))
			continue
		}
		if w.UUID == "" {
			p.add(fmt.Errorf("%s: no uuid", w.label(i)))
			continue
		}
		if _, dup := seen[w.UUID]; dup {
			p.add(fmt.Errorf("%s: listed twice", w.label(i)))
			continue
		}
		seen[w.UUID] = struct{}{}
		out = append(out, Instance{UUID: w.UUID, Name: w.Name, State: w.State, Tags: w.Tags, VCPUs: max(w.VCPUs, 0)})
	}
	return out, p.err("instance list")
}

// DecodeMetricsJSON decodes a GET /v1/instances/metrics response in its JSON
// form. A body that is not the JSON envelope is an error and no samples. An
// entry that is malformed, reports status error, lacks CPU time or resident
// set, or carries an absurd value is left out and named in the returned
// error, alongside the samples of all other entries.
func DecodeMetricsJSON(body []byte) ([]Sample, error) {
	raw, err := entries("instance metrics", body)
	if err != nil {
		return nil, err
	}
	var p problems
	out := make([]Sample, 0, len(raw))
	seen := make(map[string]struct{}, len(raw))
	older, anonymous := 0, 0
	for i, r := range raw {
		var w wireSample
		if err := json.Unmarshal(r, &w); err != nil {
			p.add(fmt.Errorf("instance #%d: %w", i, err))
			continue
		}
		if w.CPUTimeMS == nil && w.CPUTimeS != nil {
			older++
		}
		if w.UUID == "" && w.Name == "" {
			anonymous++
		}
		s, err := w.sample()
		if err == nil {
			err = firstSight(seen, s)
		}
		if err != nil {
			p.add(fmt.Errorf("%s: %w", w.label(i), err))
			continue
		}
		out = append(out, s)
	}
	if older > 0 && len(out) == 0 {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode instance metrics: %w", errOlderForm))
	}
	if anonymous > 0 && len(out) == 0 {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode instance metrics: %w", errAnonymous))
	}
	if len(raw) > 0 && len(out) == 0 {
		// Not a partial answer: stored, an empty one would wipe every pod
		// of the target's nodes while the target looked healthy.
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode instance metrics: %w", p.err("instance metrics")))
	}
	return out, p.err("instance metrics")
}

// errOlderForm says that a ukpd answers the metrics form of older releases,
// whose JSON carries cpu_time_s as CPU time over the last second (a rate,
// not a counter) and no cpu_time_ms.
var errOlderForm = errors.New("the entries carry cpu_time_s and no cpu_time_ms, the JSON form of older ukpd releases, " +
	"whose cpu_time_s is not a counter: ask for the Prometheus form with the endpoint option metrics-format=text")

// errAnonymous says that the JSON metrics name no instance. The platform's
// OpenAPI schema of a metrics entry (unikraft-cloud/openapi platform.yaml,
// components.schemas.instance_metrics, at 3ad3989) has uuid and name but
// none of state, start_count, started_at or uptime_ms, which the decoder
// does without; an entry with neither uuid nor name cannot be joined to the
// instance list at all.
var errAnonymous = errors.New("the entries name no instance (no uuid and no name), so they cannot be joined to the instance list: " +
	"ask for the Prometheus form with the endpoint option metrics-format=text")

// wireSample is a metrics entry as the JSON form carries it. Pointers tell
// a missing field from a zero one.
type wireSample struct {
	item
	State      string  `json:"state"`
	StartCount *int64  `json:"start_count"`
	StartedAt  *string `json:"started_at"`
	RSSBytes   *int64  `json:"rss_bytes"`
	CPUTimeMS  *int64  `json:"cpu_time_ms"`
	UptimeMS   *int64  `json:"uptime_ms"`
	// CPUTimeS is only read to recognise the older form.
	CPUTimeS *float64 `json:"cpu_time_s"`
}

func (w *wireSample) sample() (Sample, error) {
	if err := w.check(); err != nil {
		return Sample{}, err
	}
	cpuMS, rss, startCount, startedAt := w.CPUTimeMS, w.RSSBytes, w.StartCount, w.StartedAt
	s := Sample{UUID: w.UUID, Name: w.Name, State: w.State}
	switch {
	case s.UUID == "" && s.Name == "":
		return Sample{}, errors.New("neither uuid nor name")
	case cpuMS == nil && w.CPUTimeS != nil:
		return Sample{}, errOlderForm
	case cpuMS == nil:
		return Sample{}, errors.New("no cpu_time_ms")
	case rss == nil:
		return Sample{}, errors.New("no rss_bytes")
	case *cpuMS < 0 || uint64(*cpuMS) > maxCPUCoreNanos/1_000_000:
		return Sample{}, fmt.Errorf("cpu_time_ms %d is implausible", *cpuMS)
	case *rss < 0 || *rss > maxRSSBytes:
		return Sample{}, fmt.Errorf("rss_bytes %d is implausible", *rss)
	case startCount != nil && *startCount < 0:
		return Sample{}, fmt.Errorf("start_count %d is negative", *startCount)
	case w.UptimeMS != nil && (*w.UptimeMS < 0 || *w.UptimeMS > maxUptimeMS):
		return Sample{}, fmt.Errorf("uptime_ms %d is implausible", *w.UptimeMS)
	}
	if w.UptimeMS != nil {
		s.Uptime, s.HasUptime = time.Duration(*w.UptimeMS)*time.Millisecond, true
	}
	s.CPUCoreNanos = uint64(*cpuMS) * 1e6
	s.RSSBytes = uint64(*rss)
	if startCount != nil {
		s.StartCount = uint64(*startCount)
	}
	if startedAt != nil && *startedAt != "" {
		t, err := time.Parse(time.RFC3339, *startedAt)
		if err != nil {
			return Sample{}, fmt.Errorf("started_at: %w", err)
		}
		if t.Before(minTime) {
			return Sample{}, fmt.Errorf("started_at %s is implausible", t.Format(time.RFC3339))
		}
		s.StartedAt = t
	}
	return s, nil
}

// firstSight records s's identity and fails if it was seen before.
func firstSight(seen map[string]struct{}, s Sample) error {
	k := sampleKey(s)
	if _, dup := seen[k]; dup {
		return errors.New("reported twice")
	}
	seen[k] = struct{}{}
	return nil
}

// sampleKey identifies the instance a sample belongs to: its UUID, or its
// name where the UUID is missing.
func sampleKey(s Sample) string {
	if s.UUID != "" {
		return "uuid:" + s.UUID
	}
	return "name:" + s.Name
}

// problems collects what a decoder left out, naming the first few.
type problems struct {
	errs []error
	n    int
}

func (p *problems) add(err error) {
	p.n++
	if len(p.errs) < maxReported {
		p.errs = append(p.errs, err)
	}
}

// addf is add of fmt.Errorf(format, args...), formatted only if it is to
// be named, so that a body of a million bad lines costs no million errors.
func (p *problems) addf(format string, args ...any) {
	p.n++
	if len(p.errs) < maxReported {
		p.errs = append(p.errs, fmt.Errorf(format, args...))
	}
}

func (p *problems) err(what string) error {
	if p.n == 0 {
		return nil
	}
	errs := p.errs
	if more := p.n - len(p.errs); more > 0 {
		errs = append(errs[:len(errs):len(errs)], fmt.Errorf("and %d more", more))
	}
	return sources.WithReason(sources.ReasonDecode,
		fmt.Errorf("%s: left out %d entries: %w", what, p.n, oneLine(errs)))
}

// oneLine joins errors as errors.Join does, but writes them on one line,
// separated by "; ", so that a log entry stays one line.
type oneLine []error

func (e oneLine) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e oneLine) Unwrap() []error { return e }

// clip shortens a string that came over the network before it goes into an
// error message.
func clip(s string) string { return strings.ToValidUTF8(sources.Clip(s, 200), "?") }
