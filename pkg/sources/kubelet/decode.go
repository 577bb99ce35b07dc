package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// The Summary API, reduced to what the server reads. Pointers tell a missing
// field from a zero one.
type summary struct {
	Node *nodeStats `json:"node"`
	Pods []podStats `json:"pods"`
}

type nodeStats struct {
	StartTime time.Time    `json:"startTime"`
	CPU       *cpuStats    `json:"cpu"`
	Memory    *memoryStats `json:"memory"`
}

type podStats struct {
	PodRef     podRef           `json:"podRef"`
	Containers []containerStats `json:"containers"`
}

type podRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

type containerStats struct {
	Name      string       `json:"name"`
	StartTime time.Time    `json:"startTime"`
	CPU       *cpuStats    `json:"cpu"`
	Memory    *memoryStats `json:"memory"`
}

type cpuStats struct {
	Time                 time.Time `json:"time"`
	UsageCoreNanoSeconds *uint64   `json:"usageCoreNanoSeconds"`
}

type memoryStats struct {
	Time            time.Time `json:"time"`
	WorkingSetBytes *uint64   `json:"workingSetBytes"`
}

// Bounds beyond which a value can only be garbage.
const (
	maxMemoryBytes = 1 << 50 // 1 PiB
)

var minTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Decode turns a Summary API response of node into a batch. Malformed JSON or
// a response without node stats is an error and no batch. A pod or container
// with missing or absurd fields is left out and named in the returned error,
// alongside the batch of everything else.
func Decode(node string, body []byte) (*sources.Batch, error) {
	var s summary
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode summary of node %q: %w", node, err))
	}
	if s.Node == nil {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode summary of node %q: no node stats", node))
	}
	var problems []error
	b := &sources.Batch{Pods: make([]sources.PodPoint, 0, len(s.Pods))}
	if p, err := point(s.Node.StartTime, s.Node.CPU, s.Node.Memory); err != nil {
		problems = append(problems, fmt.Errorf("node: %w", err))
	} else {
		b.Nodes = []sources.NodePoint{{Name: node, Point: p}}
	}
	for i := range s.Pods {
		ps := &s.Pods[i]
		ref := ps.PodRef
		if ref.Name == "" || ref.Namespace == "" {
			problems = append(problems, fmt.Errorf("pod #%d: missing podRef name or namespace", i))
			continue
		}
		pp := sources.PodPoint{
			Namespace:  ref.Namespace,
			Name:       ref.Name,
			UID:        ref.UID,
			Node:       node,
			Containers: make([]sources.ContainerPoint, 0, len(ps.Containers)),
		}
		for j := range ps.Containers {
			cs := &ps.Containers[j]
			p, err := point(cs.StartTime, cs.CPU, cs.Memory)
			if err == nil && cs.Name == "" {
				err = errors.New("missing name")
			}
			if err != nil {
				problems = append(problems, fmt.Errorf("pod %s/%s container %q: %w", ref.Namespace, ref.Name, cs.Name, err))
				continue
			}
			pp.Containers = append(pp.Containers, sources.ContainerPoint{Name: cs.Name, Point: p})
		}
		if len(pp.Containers) > 0 {
			b.Pods = append(b.Pods, pp)
		}
	}
	if len(problems) > 0 {
		return b, sources.WithReason(sources.ReasonDecode,
			fmt.Errorf("summary of node %q: left out: %w", node, errors.Join(problems...)))
	}
	return b, nil
}

func point(start time.Time, cpu *cpuStats, mem *memoryStats) (sources.Point, error) {
	switch {
	case cpu == nil || cpu.UsageCoreNanoSeconds == nil:
		return sources.Point{}, errors.New("no CPU usage")
	case mem == nil || mem.WorkingSetBytes == nil:
		return sources.Point{}, errors.New("no memory working set")
	case cpu.Time.Before(minTime):
		return sources.Point{}, fmt.Errorf("CPU sample time %s is missing or implausible", cpu.Time.Format(time.RFC3339))
	case *mem.WorkingSetBytes > maxMemoryBytes:
		return sources.Point{}, fmt.Errorf("memory working set %d bytes is implausible", *mem.WorkingSetBytes)
	case !start.IsZero() && start.After(cpu.Time):
		return sources.Point{}, fmt.Errorf("start time %s is after the sample time %s",
			start.Format(time.RFC3339), cpu.Time.Format(time.RFC3339))
	}
	return sources.Point{
		Timestamp:    cpu.Time,
		StartTime:    start,
		CPUCoreNanos: *cpu.UsageCoreNanoSeconds,
		MemoryBytes:  *mem.WorkingSetBytes,
	}, nil
}
