package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// The kubelet's resource metrics endpoint, GET /metrics/resource, is what
// metrics-server v0.8.0 reads (pkg/scraper/client/resource/decode.go). The
// kubelet fills it from the same call as the Summary's only_cpu_and_memory
// form (GetCPUAndMemoryStats; k8s.io/kubernetes v1.37.2
// pkg/kubelet/metrics/collectors/resource_metrics.go), so it holds the same
// numbers, with two differences that matter here: a sample's time is in
// milliseconds where the Summary's is in whole seconds, so a rate's window is
// exact to the millisecond rather than to ±1 s; and it carries neither the
// pods' UIDs nor the node's start time (a node's counter going back is still
// a reset, pkg/store).
//
// The kubelet's own text is read by a reader of this package
// (resourceread.go), anything else by expfmt.
const (
	resNodeCPU         = "node_cpu_usage_seconds_total"
	resNodeMemory      = "node_memory_working_set_bytes"
	resContainerCPU    = "container_cpu_usage_seconds_total"
	resContainerMemory = "container_memory_working_set_bytes"
	resContainerStart  = "container_start_time_seconds"
	resScrapeError     = "resource_scrape_error"
)

// Bounds of the resource text. A kubelet's series carry at most three
// labels, each a Kubernetes name, so no line of it comes near
// maxResourceLine; a longer one is refused before expfmt reads it, as
// expfmt's time grows with the square of a line's labels
// (pkg/sources/promscrape/doc.go). A counter above maxCPUSeconds would not
// fit core-nanoseconds in 64 bits; a start time above maxStartSeconds is
// after the year 2200.
const (
	maxResourceLine = 4 << 10
	maxCPUSeconds   = float64(math.MaxUint64/1e9) - 1
	maxStartSeconds = 7.3e9
)

// DecodeResource turns a /metrics/resource response of node into a batch,
// by the rules of Decode: text expfmt cannot parse, a line over
// maxResourceLine, a kubelet that says it could not read its stats
// (resource_scrape_error 1) or a response without node series is an error
// and no batch; a pod with a container whose series are missing, absurd or
// repeated is left out and named in the returned error, alongside the batch
// of everything else. A series without a timestamp is taken as sampled at
// received, as metrics-server takes it. Counters go from seconds to
// core-nanoseconds truncated, as metrics-server converts them.
func DecodeResource(ctx context.Context, node string, body []byte, received time.Time) (*sources.Batch, error) {
	return decodeResource(ctx, node, body, received, readResourceText)
}

// decodeResource is DecodeResource with read in place of readResourceText
// (BenchmarkDecode compares).
func decodeResource(ctx context.Context, node string, body []byte, received time.Time, read func([]byte) (*resSeriesSet, bool)) (*sources.Batch, error) {
	fail := func(err error) (*sources.Batch, error) {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode resource metrics of node %q: %w", node, err))
	}
	set, err := parseResource(body, read)
	if err != nil {
		return fail(err)
	}
	if m := set[famScrapeError]; len(m) > 0 && m[0].value != 0 {
		return fail(errors.New("the kubelet could not read its stats (resource_scrape_error is not 0)"))
	}
	d := decoder{ctx: ctx, node: node}
	for _, f := range []resFamily{famNodeCPU, famNodeMemory} {
		m, name := set[f], resFamilyNames[f]
		if len(m) == 0 {
			continue
		}
		d.hasNode = true
		if len(m) > 1 {
			d.problems = append(d.problems, fmt.Errorf("node: %s listed %d times", name, len(m)))
			d.nodeStat = stats{}
			break
		}
		s := &d.nodeStat.cpu
		if f == famNodeMemory {
			s = &d.nodeStat.mem
		}
		if err := resourceSample(s, m[0], f == famNodeCPU, received); err != nil {
			d.problems = append(d.problems, fmt.Errorf("node: %s: %w", name, err))
		}
	}
	if !d.hasNode {
		return fail(errors.New("no node series"))
	}
	if err := d.resourcePods(set, received); err != nil {
		if errors.Is(err, errDone) {
			return nil, sources.WithReason(sources.ReasonTimeout, fmt.Errorf("decode resource metrics of node %q: %w", node, ctx.Err()))
		}
		return fail(err)
	}
	return d.finish()
}

// parseResource bounds every line and reads the series DecodeResource uses:
// with read (readResourceText) when the text is in the kubelet's form, with
// expfmt otherwise. The text comes from the network: a panic in either fails
// this scrape, not the server.
func parseResource(body []byte, read func([]byte) (*resSeriesSet, bool)) (set *resSeriesSet, err error) {
	defer func() {
		if r := recover(); r != nil {
			set, err = nil, fmt.Errorf("text parser panicked: %v", r)
		}
	}()
	for i, rest := 1, body; len(rest) > 0; i++ {
		line, next, _ := bytes.Cut(rest, []byte{'\n'})
		if len(line) > maxResourceLine {
			return nil, fmt.Errorf("line %d is longer than %d bytes", i, maxResourceLine)
		}
		rest = next
	}
	if set, ok := read(body); ok {
		return set, nil
	}
	return parseResourceExpfmt(body)
}

// parseResourceExpfmt reads the series with expfmt.
func parseResourceExpfmt(body []byte) (*resSeriesSet, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	var set resSeriesSet
	for f, name := range resFamilyNames {
		for _, m := range fams[name].GetMetric() {
			s := resSeries{value: resourceValue(m), ms: m.GetTimestampMs(), timed: m.TimestampMs != nil}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					s.namespace = l.GetValue()
				case "pod":
					s.pod = l.GetValue()
				case "container":
					s.container = l.GetValue()
				}
			}
			set[f] = append(set[f], s)
		}
	}
	return &set, nil
}

// resourcePods reads the containers' series into pods, in the order their
// pods first appear, and adds each pod as the Summary's reader does. The
// k-th series of a family for one container fills the container's k-th
// entry, so a container listed twice is two entries and its pod is left out
// (sources.DropDuplicatePods).
func (d *decoder) resourcePods(set *resSeriesSet, received time.Time) error {
	type podKey struct{ namespace, name string }
	var (
		pods []podStats
		// filled has a bit a family for each container entry of each pod:
		// which families have given it a series.
		filled  [][]uint8
		index   = map[podKey]int{}
		invalid = map[podKey]error{}
	)
	for _, f := range []resFamily{famContainerCPU, famContainerMemory, famContainerStart} {
		name := resFamilyNames[f]
		for _, m := range set[f] {
			if err := d.check(); err != nil {
				return err
			}
			ns, pod, container := m.namespace, m.pod, m.container
			if ns == "" || pod == "" {
				d.problems = append(d.problems, fmt.Errorf("a %s series names no pod or namespace", name))
				continue
			}
			k := podKey{ns, pod}
			i, ok := index[k]
			if !ok {
				i = len(pods)
				index[k] = i
				pods = append(pods, podStats{namespace: ns, name: pod})
				filled = append(filled, nil)
			}
			c := containerEntry(&pods[i], &filled[i], container, 1<<f)
			var err error
			switch f {
			case famContainerCPU:
				err = resourceSample(&c.cpu, m, true, received)
			case famContainerMemory:
				err = resourceSample(&c.mem, m, false, received)
			default:
				err = resourceStart(&c.startTime, m)
			}
			if err != nil && invalid[k] == nil {
				invalid[k] = fmt.Errorf("pod %s/%s container %q: %s: %w (the pod is left out)", ns, pod, container, name, err)
			}
		}
	}
	for i := range pods {
		if err := invalid[podKey{pods[i].namespace, pods[i].name}]; err != nil {
			d.problems = append(d.problems, err)
			continue
		}
		d.pod = pods[i]
		d.addPod(i)
	}
	return nil
}

// containerEntry returns the first entry named name of p that family (a
// bit of filled, whose entries stand for p's) has not filled, adding one if
// there is none, and marks it filled: the k-th series of a family for a
// container fills its k-th entry.
func containerEntry(p *podStats, filled *[]uint8, name string, family uint8) *stats {
	for i := range p.containers {
		if p.containers[i].name == name && (*filled)[i]&family == 0 {
			(*filled)[i] |= family
			return &p.containers[i]
		}
	}
	p.containers = append(p.containers, stats{name: name})
	*filled = append(*filled, family)
	return &p.containers[len(p.containers)-1]
}

// resourceSample reads one CPU (seconds) or working-set (bytes) series.
func resourceSample(s *sample, m resSeries, cpu bool, received time.Time) error {
	v := m.value
	limit := float64(maxMemoryBytes)
	if cpu {
		limit = maxCPUSeconds
	}
	if !(v >= 0 && v <= limit) { // NaN fails both
		return fmt.Errorf("value %g is implausible", v)
	}
	s.time = received
	if m.timed {
		s.time = time.UnixMilli(m.ms)
	}
	s.value, s.ok = uint64(v), true
	if cpu {
		s.value = uint64(v * 1e9)
	}
	return nil
}

// resourceStart reads a container's start time, in seconds since the
// epoch, to the millisecond of the samples' times: the kubelet writes it to
// the nanosecond, and a container sampled within a millisecond of its start
// would otherwise read as sampled before it.
func resourceStart(t *time.Time, m resSeries) error {
	v := m.value
	if !(v > 0 && v <= maxStartSeconds) {
		return fmt.Errorf("start time %g is implausible", v)
	}
	*t = time.UnixMilli(int64(math.Floor(v * 1e3)))
	return nil
}

// resourceValue is a series' value whether its family is typed counter,
// gauge or not at all.
func resourceValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return m.GetUntyped().GetValue()
}
