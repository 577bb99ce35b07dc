package fakeukpd

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// Instance states, as the platform API names them.
const (
	StateRunning  = "running"
	StateStandby  = "standby"
	StateStopped  = "stopped"
	StateDraining = "draining" // draining its connections before it stops; it still runs
)

// Tag keys kraftlet writes on the instance of a container.
const (
	TagNamespace = "k8s.io:namespace"
	TagPod       = "k8s.io:pod"
	TagContainer = "k8s.io:container"
	TagNode      = "kraftlet:node"
	maxTagBytes  = 256
)

// InstanceSpec describes an instance to add: Name and UUID are generated
// when empty, and Tags, when not nil, replace the kraftlet tags (to test
// instances kraftlet did not tag). CPUCores is the CPU rate, RSSBytes the
// resident set while running.
type InstanceSpec struct {
	Namespace string   `json:"namespace,omitempty"`
	Pod       string   `json:"pod,omitempty"`
	Container string   `json:"container,omitempty"`
	Node      string   `json:"node,omitempty"`
	Name      string   `json:"name,omitempty"`
	UUID      string   `json:"uuid,omitempty"`
	Tags      []string `json:"tags,omitempty"`
	CPUCores  float64  `json:"cpuCores"`
	RSSBytes  uint64   `json:"rssBytes"`
	State     string   `json:"state,omitempty"` // running when empty
}

// Instance is the state of an instance, for tests and the control API.
type Instance struct {
	InstanceSpec
	CPUTimeMS  int64     `json:"cpuTimeMs"`
	StartCount uint64    `json:"startCount"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
}

// instance is the server's record of one instance: its public state (but
// for CPUTimeMS) and what drives its counters.
type instance struct {
	Instance
	maxCores           float64 // the highest CPU rate given: its vCPUs, rounded up
	createdAt, stopped time.Time
	seq                int // creation order
	// cpuNS (core-nanoseconds) and upNS (summed over every start) are the
	// CPU counter and the uptime at since; both grow only while it runs.
	cpuNS float64
	upNS  time.Duration
	since time.Time
}

// runs says whether the instance's VM runs (running or draining).
func (in *instance) runs() bool { return in.State == StateRunning || in.State == StateDraining }

func (in *instance) counterNS(now time.Time) float64 {
	if !in.runs() {
		return in.cpuNS
	}
	return in.cpuNS + in.CPUCores*float64(now.Sub(in.since))
}

// uptime is the uptime accumulated over every start at now, standing still
// while the instance does not run: what the platform's metrics example
// shows (a standby instance with start_count 2 and more uptime than its
// last run lasted) and its tutorial says ("total accumulated uptime of the
// instance ... across all starts").
func (in *instance) uptime(now time.Time) time.Duration {
	if !in.runs() {
		return in.upNS
	}
	return in.upNS + now.Sub(in.since)
}

// cpuTimeMS is the counter in whole milliseconds, as ukpd reports it.
func (in *instance) cpuTimeMS(now time.Time) int64 { return int64(math.Floor(in.counterNS(now) / 1e6)) }

// settle folds the counter up to now, before the rate or state changes.
func (in *instance) settle(now time.Time) {
	in.cpuNS, in.upNS, in.since = in.counterNS(now), in.uptime(now), now
}

// start starts the instance now, its CPU counter over unless cumulative.
func (in *instance) start(now time.Time, cumulative bool) {
	in.settle(now)
	in.State, in.StartedAt = StateRunning, now
	in.StartCount++
	if !cumulative {
		in.cpuNS = 0
	}
}

// setState moves to state; stopped_at is now if the VM no longer runs.
func (in *instance) setState(state string, now time.Time) {
	in.settle(now)
	if in.State = state; !in.runs() {
		in.stopped = now
	}
}

func checkCores(cores float64) error {
	if cores < 0 || math.IsNaN(cores) || math.IsInf(cores, 0) {
		return fmt.Errorf("CPU rate %g is not a non-negative number", cores)
	}
	return nil
}

func (in *instance) public(now time.Time) Instance {
	p := in.Instance
	p.Tags, p.CPUTimeMS = slices.Clone(in.Tags), in.cpuTimeMS(now)
	return p
}

// KraftletTag returns the tag kraftlet writes: "key=value" with every
// character outside [A-Za-z0-9-+_.:=] replaced by "_", cut to 256 bytes.
func KraftletTag(key, value string) string {
	var b strings.Builder
	for _, r := range key + "=" + value {
		if b.Len() >= maxTagBytes {
			break
		}
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-+_.:=", r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// AddInstance adds an instance, started now with start_count 1, and
// returns it.
func (s *Server) AddInstance(spec InstanceSpec) (Instance, error) {
	if spec.Tags == nil && (spec.Namespace == "" || spec.Pod == "" || spec.Container == "") {
		return Instance{}, errors.New("an instance needs a namespace, pod and container, or explicit tags")
	}
	if err := checkCores(spec.CPUCores); err != nil {
		return Instance{}, err
	}
	state := cmp.Or(spec.State, StateRunning)
	if !slices.Contains([]string{StateRunning, StateStandby, StateStopped, StateDraining}, state) {
		return Instance{}, fmt.Errorf("unknown state %q (want %s, %s, %s or %s)", state, StateRunning, StateStandby, StateStopped, StateDraining)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.seq++
	in := &instance{Instance: Instance{InstanceSpec: spec}, maxCores: spec.CPUCores, createdAt: now, seq: s.seq}
	in.UUID = cmp.Or(in.UUID, fmt.Sprintf("00000000-0000-4000-8000-%012x", s.seq))
	in.Name = cmp.Or(in.Name, fmt.Sprintf("%s-%s-%d", cmp.Or(spec.Pod, "instance"), cmp.Or(spec.Container, "c"), s.seq))
	if s.find(in.UUID) != nil || s.find(in.Name) != nil {
		return Instance{}, fmt.Errorf("an instance %q or %q exists", in.UUID, in.Name)
	}
	if in.Tags == nil {
		in.Tags = []string{KraftletTag(TagNamespace, spec.Namespace), KraftletTag(TagPod, spec.Pod), KraftletTag(TagContainer, spec.Container)}
		if spec.Node != "" {
			in.Tags = append(in.Tags, KraftletTag(TagNode, spec.Node))
		}
	}
	in.start(now, false)
	in.setState(state, now) // changes nothing for a running one
	s.instances[in.UUID] = in
	return in.public(now), nil
}

// find returns the instance with that UUID or name; s.mu must be held.
func (s *Server) find(id string) *instance {
	if in, ok := s.instances[id]; ok {
		return in
	}
	for _, in := range s.instances {
		if in.Name == id {
			return in
		}
	}
	return nil
}

// update applies fn to the instance with that UUID or name.
func (s *Server) update(id string, fn func(in *instance, now time.Time)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.find(id)
	if in == nil {
		return fmt.Errorf("instance %q: %w", id, fakecore.ErrNotFound)
	}
	fn(in, s.clock.Now())
	return nil
}

// Instance returns the instance with that UUID or name.
func (s *Server) Instance(id string) (out Instance, err error) {
	err = s.update(id, func(in *instance, now time.Time) { out = in.public(now) })
	return out, err
}

// Instances returns every instance, by UUID.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := make([]Instance, 0, len(s.instances))
	for _, in := range s.sortedLocked() {
		out = append(out, in.public(now))
	}
	return out
}

// InstancesOf returns the UUIDs of a pod's instances, of one container if
// container is not empty.
func (s *Server) InstancesOf(namespace, pod, container string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, in := range s.sortedLocked() {
		if in.Namespace == namespace && in.Pod == pod && (container == "" || in.Container == container) {
			ids = append(ids, in.UUID)
		}
	}
	return ids
}

func (s *Server) sortedLocked() []*instance {
	return slices.SortedFunc(maps.Values(s.instances), func(a, b *instance) int { return strings.Compare(a.UUID, b.UUID) })
}

// SetCPU sets an instance's CPU rate in cores, from now on.
func (s *Server) SetCPU(id string, cores float64) error {
	if err := checkCores(cores); err != nil {
		return err
	}
	return s.update(id, func(in *instance, now time.Time) {
		in.settle(now)
		in.CPUCores, in.maxCores = cores, max(in.maxCores, cores)
	})
}

// SetRSS sets an instance's resident set while it runs.
func (s *Server) SetRSS(id string, bytes uint64) error {
	return s.update(id, func(in *instance, _ time.Time) { in.RSSBytes = bytes })
}

// Restart starts an instance again, whatever its state (README.md).
func (s *Server) Restart(id string) error {
	return s.update(id, func(in *instance, now time.Time) { in.start(now, s.cumulative) })
}

// Standby puts an instance in standby, as scale-to-zero does.
func (s *Server) Standby(id string) error { return s.setState(id, StateStandby) }

// Drain puts an instance in the draining state, still running.
func (s *Server) Drain(id string) error { return s.setState(id, StateDraining) }

// Stop stops an instance: it stays in the list and leaves the metrics.
func (s *Server) Stop(id string) error { return s.setState(id, StateStopped) }

func (s *Server) setState(id, state string) error {
	return s.update(id, func(in *instance, now time.Time) { in.setState(state, now) })
}

// Remove deletes an instance.
func (s *Server) Remove(id string) error {
	return s.update(id, func(in *instance, _ time.Time) { delete(s.instances, in.UUID) })
}
