// Package sources defines what a metrics backend hands to the rest of the
// server — batches of CPU and memory points — and the scrape loop that
// collects them from every target on a fixed resolution.
//
// A source knows nothing of the store or the API: it returns a Batch and the
// scrape loop passes it to a Sink.
package sources

import (
	"context"
	"time"
)

// Point is one sample of a node or container.
type Point struct {
	// Timestamp is when the sample was taken, by the clock of whoever took it
	// (the kubelet's, or the scraper's where the backend has none).
	Timestamp time.Time
	// StartTime is when the counter began: the container or node start. A
	// counter is cumulative only while StartTime stays the same.
	StartTime time.Time
	// CPUCoreNanos is the cumulative CPU usage in core-nanoseconds.
	CPUCoreNanos uint64
	// MemoryBytes is the working-set memory in bytes (for ukpd, the resident
	// set of the VMM).
	MemoryBytes uint64
}

// NodePoint is the usage of a whole node.
type NodePoint struct {
	Name string
	Point
}

// ContainerPoint is the usage of one container of a pod.
type ContainerPoint struct {
	Name string
	Point
}

// PodPoint is the usage of one pod, container by container.
type PodPoint struct {
	Namespace string
	Name      string
	// UID is the pod's UID when the backend knows it; empty otherwise.
	UID string
	// Node is the node the pod runs on.
	Node       string
	Containers []ContainerPoint
}

// Batch is what one scrape of one target returned.
type Batch struct {
	Nodes []NodePoint
	Pods  []PodPoint
}

// Target is one endpoint that a scrape reaches: a node's kubelet, a ukpd
// daemon. Implementations must be safe for concurrent use.
type Target interface {
	// ID names the target in logs, errors and health, e.g. "node/worker-1".
	ID() string
	// Nodes lists the nodes whose data this target owns: after a successful
	// scrape, what the batch holds for these nodes replaces what was stored.
	Nodes() []string
	// Scrape collects one batch. It returns a non-nil batch with a nil error
	// on success. On a partial decode failure it returns the points it could
	// read together with an error that says what was left out. It returns a
	// nil batch when nothing could be read. It honours ctx's deadline.
	Scrape(ctx context.Context) (*Batch, error)
}

// Source is one backend (kubelet, ukpd). Targets is called once per scrape
// tick, from one goroutine.
type Source interface {
	// Name is a short constant, used as a label in self-metrics: "kubelet".
	Name() string
	// Targets returns what to scrape this tick.
	Targets() ([]Target, error)
}

// Sink receives batches. Store is called from many goroutines at once, one
// call per scraped target.
type Sink interface {
	// Store replaces the data of source for the given nodes with batch,
	// received at scrapedAt by the scraper's clock.
	Store(source string, nodes []string, batch *Batch, scrapedAt time.Time)
	// Failed records that a scrape of the given nodes failed at failedAt.
	// Stored data is kept and served until it is stale.
	Failed(source string, nodes []string, err error, failedAt time.Time)
	// Prune drops data of source for nodes that are no longer targeted.
	Prune(source string, keep map[string]struct{})
}
