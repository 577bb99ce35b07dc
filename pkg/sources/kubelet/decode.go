package kubelet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// The Summary API, reduced to what the server reads. ok tells a missing
// value (or object) from a zero one.
type sample struct {
	time  time.Time
	value uint64
	ok    bool
}

// stats is the node's or one container's entry.
type stats struct {
	name      string
	startTime time.Time
	cpu, mem  sample
}

type podStats struct {
	namespace, name, uid string
	containers           []stats
}

// Bounds beyond which a value can only be garbage.
const (
	maxMemoryBytes = 1 << 50 // 1 PiB
)

var minTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// The fields read from each object of a Summary; every other key is skipped.
var (
	summaryFields   = []string{"node", "pods"}
	nodeFields      = []string{"startTime", "cpu", "memory"}
	podFields       = []string{"podRef", "containers"}
	podRefFields    = []string{"name", "namespace", "uid"}
	containerFields = []string{"name", "startTime", "cpu", "memory"}
	cpuFields       = []string{"time", "usageCoreNanoSeconds"}
	memoryFields    = []string{"time", "workingSetBytes"}
)

// Decode turns a Summary API response of node into a batch. Malformed JSON or
// a response without node stats is an error and no batch. A pod or container
// with missing or absurd fields, and a pod listed twice, is left out and named
// in the returned error, alongside the batch of everything else.
//
// The document is read by a small validating reader rather than
// encoding/json: decoding is most of the cost of a scrape cycle, and the
// reader reads only the fields used, without reflection.
func Decode(node string, body []byte) (*sources.Batch, error) {
	return DecodeContext(context.Background(), node, body)
}

// DecodeContext is Decode that gives up, with a timeout reason and no
// batch, once ctx is done: it looks every checkEvery pods or containers,
// so a scrape that has overrun its timeout stops decoding rather than
// spend its CPU in a goroutine nobody waits for.
func DecodeContext(ctx context.Context, node string, body []byte) (*sources.Batch, error) {
	d := decoder{ctx: ctx, node: node, r: reader{data: body}}
	if err := d.summary(); err != nil {
		if errors.Is(err, errDone) {
			return nil, sources.WithReason(sources.ReasonTimeout, fmt.Errorf("decode summary of node %q: %w", node, ctx.Err()))
		}
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode summary of node %q: %w", node, err))
	}
	if !d.hasNode {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode summary of node %q: no node stats", node))
	}
	return d.finish()
}

// checkEvery is how many pods or containers are read between two looks at
// the context: a look costs about as much as reading one entry.
const checkEvery = 256

// errDone stops a decode whose context is done.
var errDone = errors.New("context done")

// decoder turns the Summary into a batch as it reads, pod by pod.
type decoder struct {
	ctx  context.Context
	node string
	r    reader
	// entries counts the pods and containers read, for checkEvery.
	entries int

	hasNode  bool
	nodeStat stats
	batch    sources.Batch
	// pod is the pod being read; its containers slice is reused.
	pod      podStats
	problems []error
	// namespaces and containerNames repeat from pod to pod.
	namespaces, containerNames recent
}

// check returns errDone every checkEvery entries once the context is done.
func (d *decoder) check() error {
	d.entries++
	if d.entries%checkEvery == 0 && d.ctx.Err() != nil {
		return errDone
	}
	return nil
}

func (d *decoder) summary() error {
	r := &d.r
	if null, err := r.null(); null || err != nil {
		if err == nil {
			err = r.end()
		}
		return err
	}
	f := fields{names: summaryFields}
	err := r.object(func(key []byte) error {
		i, err := f.known(key)
		switch {
		case err != nil:
			return err
		case i == 0:
			return d.nodeStats()
		case i == 1:
			return d.pods()
		}
		return r.skip()
	})
	if err != nil {
		return err
	}
	return r.end()
}

func (d *decoder) nodeStats() error {
	if null, err := d.r.null(); null || err != nil {
		return err
	}
	if d.r.peek() != '{' {
		return d.r.typeError("object")
	}
	d.hasNode = true
	return d.stats(&d.nodeStat, nodeFields, 0)
}

// stats reads a node or container entry. names are its known fields; the
// offset of "startTime" in names is start, and "cpu" and "memory" follow it.
func (d *decoder) stats(s *stats, names []string, start int) error {
	r := &d.r
	f := fields{names: names}
	return r.object(func(key []byte) error {
		i, err := f.known(key)
		switch {
		case err != nil:
			return err
		case i < 0:
			return r.skip()
		case i < start:
			return r.strFrom(&s.name, &d.containerNames)
		case i == start:
			return r.time(&s.startTime)
		case i == start+1:
			return d.sample(&s.cpu, cpuFields)
		default:
			return d.sample(&s.mem, memoryFields)
		}
	})
}

// sample reads a cpu or memory object: its time and its one value.
func (d *decoder) sample(s *sample, names []string) error {
	r := &d.r
	if null, err := r.null(); null || err != nil {
		return err
	}
	if r.peek() != '{' {
		return r.typeError("object")
	}
	var v sample
	f := fields{names: names}
	err := r.object(func(key []byte) error {
		i, err := f.known(key)
		switch {
		case err != nil:
			return err
		case i == 0:
			return r.time(&v.time)
		case i == 1:
			return r.uint(&v.value, &v.ok)
		}
		return r.skip()
	})
	*s = v
	return err
}

func (d *decoder) pods() error {
	r := &d.r
	if null, err := r.null(); null || err != nil {
		return err
	}
	if r.peek() != '[' {
		return r.typeError("array")
	}
	return r.array(func(i int) error {
		if err := d.check(); err != nil {
			return err
		}
		d.pod = podStats{containers: d.pod.containers[:0]}
		if null, err := r.null(); null || err != nil {
			if err == nil {
				d.addPod(i)
			}
			return err
		}
		if r.peek() != '{' {
			return r.typeError("object")
		}
		if err := d.podEntry(); err != nil {
			return err
		}
		d.addPod(i)
		return nil
	})
}

func (d *decoder) podEntry() error {
	r := &d.r
	f := fields{names: podFields}
	return r.object(func(key []byte) error {
		i, err := f.known(key)
		switch {
		case err != nil:
			return err
		case i == 0:
			return d.podRef()
		case i == 1:
			return d.containers()
		}
		return r.skip()
	})
}

func (d *decoder) podRef() error {
	r := &d.r
	if null, err := r.null(); null || err != nil {
		return err
	}
	if r.peek() != '{' {
		return r.typeError("object")
	}
	f := fields{names: podRefFields}
	return r.object(func(key []byte) error {
		i, err := f.known(key)
		switch {
		case err != nil:
			return err
		case i == 0:
			return r.str(&d.pod.name)
		case i == 1:
			return r.strFrom(&d.pod.namespace, &d.namespaces)
		case i == 2:
			return r.str(&d.pod.uid)
		}
		return r.skip()
	})
}

func (d *decoder) containers() error {
	r := &d.r
	if null, err := r.null(); null || err != nil {
		d.pod.containers = d.pod.containers[:0]
		return err
	}
	if r.peek() != '[' {
		return r.typeError("array")
	}
	return r.array(func(int) error {
		if err := d.check(); err != nil {
			return err
		}
		d.pod.containers = append(d.pod.containers, stats{})
		c := &d.pod.containers[len(d.pod.containers)-1]
		if null, err := r.null(); null || err != nil {
			return err
		}
		if r.peek() != '{' {
			return r.typeError("object")
		}
		return d.stats(c, containerFields, 1)
	})
}

// addPod turns the pod just read (the i-th) into a PodPoint. A pod with a
// container that cannot be used is left out whole, as metrics-server leaves
// it out: served with some of its containers, it would read low against the
// request of all of them.
func (d *decoder) addPod(i int) {
	ps := &d.pod
	if ps.name == "" || ps.namespace == "" {
		d.problems = append(d.problems, fmt.Errorf("pod #%d: missing podRef name or namespace", i))
		return
	}
	pp := sources.PodPoint{
		Namespace:  ps.namespace,
		Name:       ps.name,
		UID:        ps.uid,
		Node:       d.node,
		Containers: make([]sources.ContainerPoint, 0, len(ps.containers)),
	}
	for j := range ps.containers {
		cs := &ps.containers[j]
		p, err := point(cs)
		if err == nil && cs.name == "" {
			err = errors.New("missing name")
		}
		if err != nil {
			d.problems = append(d.problems, fmt.Errorf("pod %s/%s container %q: %w (the pod is left out)", ps.namespace, ps.name, cs.name, err))
			return
		}
		pp.Containers = append(pp.Containers, sources.ContainerPoint{Name: cs.name, Point: p})
	}
	if len(pp.Containers) > 0 {
		d.batch.Pods = append(d.batch.Pods, pp)
	}
}

// finish adds the node's point, leaves out pods listed more than once, and
// reports what was left out.
func (d *decoder) finish() (*sources.Batch, error) {
	var problems []error
	if p, err := point(&d.nodeStat); err != nil {
		problems = append(problems, fmt.Errorf("node: %w", err))
	} else {
		d.batch.Nodes = []sources.NodePoint{{Name: d.node, Point: p}}
	}
	problems = append(problems, d.problems...)
	var dups []error
	d.batch.Pods, dups = sources.DropDuplicatePods(d.batch.Pods)
	problems = append(problems, dups...)
	if len(problems) > 0 {
		return &d.batch, sources.WithReason(sources.ReasonDecode,
			fmt.Errorf("summary of node %q: left out: %w", d.node, errors.Join(problems...)))
	}
	return &d.batch, nil
}

func point(s *stats) (sources.Point, error) {
	switch {
	case !s.cpu.ok:
		return sources.Point{}, errors.New("no CPU usage")
	case !s.mem.ok:
		return sources.Point{}, errors.New("no memory working set")
	case s.cpu.time.Before(minTime):
		return sources.Point{}, fmt.Errorf("CPU sample time %s is missing or implausible", s.cpu.time.Format(time.RFC3339))
	case s.mem.value > maxMemoryBytes:
		return sources.Point{}, fmt.Errorf("memory working set %d bytes is implausible", s.mem.value)
	case !s.startTime.IsZero() && s.startTime.After(s.cpu.time):
		return sources.Point{}, fmt.Errorf("start time %s is after the sample time %s",
			s.startTime.Format(time.RFC3339), s.cpu.time.Format(time.RFC3339))
	}
	return sources.Point{
		Timestamp:    s.cpu.time,
		StartTime:    s.startTime,
		CPUCoreNanos: s.cpu.value,
		MemoryBytes:  s.mem.value,
	}, nil
}
