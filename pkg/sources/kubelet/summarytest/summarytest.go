// Package summarytest generates kubelet Summary API responses for tests and
// benchmarks, deterministically from a seed.
package summarytest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// Node describes one generated Summary.
type Node struct {
	Name       string
	Pods       int
	Containers int
	// Time is the sample time.
	Time time.Time
	// Start is when the node's containers started; a day before Time when
	// zero. Keep it fixed across samples of one series.
	Start time.Time
}

type cpu struct {
	Time                 time.Time `json:"time"`
	UsageNanoCores       uint64    `json:"usageNanoCores"`
	UsageCoreNanoSeconds uint64    `json:"usageCoreNanoSeconds"`
}

type memory struct {
	Time            time.Time `json:"time"`
	AvailableBytes  uint64    `json:"availableBytes"`
	UsageBytes      uint64    `json:"usageBytes"`
	WorkingSetBytes uint64    `json:"workingSetBytes"`
	RSSBytes        uint64    `json:"rssBytes"`
	PageFaults      uint64    `json:"pageFaults"`
	MajorPageFaults uint64    `json:"majorPageFaults"`
}

type container struct {
	Name      string    `json:"name"`
	StartTime time.Time `json:"startTime"`
	CPU       cpu       `json:"cpu"`
	Memory    memory    `json:"memory"`
}

type podRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

type pod struct {
	PodRef     podRef      `json:"podRef"`
	StartTime  time.Time   `json:"startTime"`
	Containers []container `json:"containers"`
	CPU        cpu         `json:"cpu"`
	Memory     memory      `json:"memory"`
}

type nodeStats struct {
	NodeName         string    `json:"nodeName"`
	SystemContainers []any     `json:"systemContainers"`
	StartTime        time.Time `json:"startTime"`
	CPU              cpu       `json:"cpu"`
	Memory           memory    `json:"memory"`
}

type summary struct {
	Node nodeStats `json:"node"`
	Pods []pod     `json:"pods"`
}

// PodName is the name of pod i on node, in namespace NamespaceOf(i).
func PodName(node string, i int) string { return fmt.Sprintf("%s-pod-%d", node, i) }

// NamespaceOf spreads pods over ten namespaces.
func NamespaceOf(i int) string { return fmt.Sprintf("ns-%d", i%10) }

// Generate returns the Summary JSON of n, shaped as a kubelet writes it with
// only_cpu_and_memory=true, with values drawn from rng.
func Generate(rng *rand.Rand, n Node) []byte {
	start := n.Start
	if start.IsZero() {
		start = n.Time.Add(-24 * time.Hour)
	}
	sample := func(cores float64, mem uint64) (cpu, memory) {
		return cpu{Time: n.Time, UsageNanoCores: uint64(cores * 1e9), UsageCoreNanoSeconds: uint64(cores * 86400 * 1e9)},
			memory{Time: n.Time, AvailableBytes: 1 << 30, UsageBytes: mem + 1<<20, WorkingSetBytes: mem, RSSBytes: mem / 2, PageFaults: 1000, MajorPageFaults: 1}
	}
	s := summary{Node: nodeStats{NodeName: n.Name, SystemContainers: []any{}, StartTime: start.Add(-time.Hour)}}
	s.Node.CPU, s.Node.Memory = sample(4*rng.Float64(), 8<<30+rng.Uint64N(8<<30))
	s.Pods = make([]pod, n.Pods)
	for i := range s.Pods {
		p := pod{
			PodRef:     podRef{Name: PodName(n.Name, i), Namespace: NamespaceOf(i), UID: fmt.Sprintf("%08x-0000-4000-8000-%012x", rng.Uint32(), rng.Uint64N(1<<48))},
			StartTime:  start,
			Containers: make([]container, n.Containers),
		}
		for j := range p.Containers {
			c := container{Name: fmt.Sprintf("c%d", j), StartTime: start}
			c.CPU, c.Memory = sample(rng.Float64()/2, 16<<20+rng.Uint64N(512<<20))
			p.Containers[j] = c
		}
		p.CPU, p.Memory = sample(rng.Float64(), 64<<20)
		s.Pods[i] = p
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // only plain types above
	}
	return b
}
