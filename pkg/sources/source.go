// Package sources defines what a metrics backend hands to the rest of the
// server — batches of CPU and memory points and of named series — and the
// scrape loop that collects them from every target on a fixed resolution.
//
// A source knows nothing of the store or the API: it returns a Batch and the
// scrape loop passes it to a Sink, and its named series to a SeriesSink.
package sources

import (
	"context"
	"strings"
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

// SeriesPoint is one sample of a named series that a pod's own endpoint, a
// node exporter or an endpoint picker exposed, credited to one pod, or to
// another object under ObjectKey. A point with no Metric holds no sample:
// it says the target speaks for that pod or object and was read, so that
// a metric it has no series of there is known to have none.
type SeriesPoint struct {
	// Namespace and Pod name the pod, or Pod is an ObjectKey.
	Namespace, Pod string
	// UID is the UID of the pod the sample is credited to, "" when not known.
	UID string
	// Container is the container the series names, "" for none.
	Container string
	// Metric is the name the series is served under.
	Metric string
	// Series identifies the series within its metric and pod: its labels
	// as name=value pairs, each ended by a NUL byte, in name order
	// (SeriesLabels reads them back).
	Series string
	// Value is the exposed value; for a Counter, a cumulative count whose
	// rate per second is served.
	Value   float64
	Counter bool
	// Timestamp is when the sample was read.
	Timestamp time.Time
	// Exporter says a node exporter credited the pod, not the pod's own
	// endpoint: the pod's own series of a metric and container win.
	Exporter bool
}

// InferencePools is the resource of the inference gateway's pools
// (gateway-api-inference-extension api/v1/inferencepool_types.go).
const InferencePools = "inferencepools.inference.networking.k8s.io"

// ObjectKey is the name under which series credited to an object other
// than a pod are kept beside pods' (SeriesPoint.Pod): its resource and name
// joined by a slash, which no pod name holds.
func ObjectKey(resource, name string) string { return resource + "/" + name }

// A histogram's parts are series of their own, each a counter: its buckets,
// its _sum and its _count. LabelHistogramPart names the part (PartBucket,
// PartSum, PartCount) and LabelLE a bucket's upper bound, as the exposition
// writes it ("+Inf" for the last). The part's label name begins with "__",
// which Prometheus reserves, so that no exposed label collides with it.
const (
	LabelHistogramPart = "__histogram"
	LabelLE            = "le"
	PartBucket         = "bucket"
	PartSum            = "sum"
	PartCount          = "count"
)

// SeriesLabels reads back the labels of a SeriesPoint's Series (a label
// name holds no '=').
func SeriesLabels(series string) map[string]string {
	if series == "" {
		return nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(strings.TrimSuffix(series, "\x00"), "\x00") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			out[k] = v
		}
	}
	return out
}

// Batch is what one scrape of one target returned.
type Batch struct {
	Nodes []NodePoint
	Pods  []PodPoint
	// Series are the named series of the target, for targets that expose
	// them (pod endpoints, node exporters).
	Series []SeriesPoint
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

// SeriesSink receives the named series of every target. StoreSeries is
// called from many goroutines at once, one call per successful scrape of a
// target; PruneSeries once per tick and source.
type SeriesSink interface {
	// StoreSeries replaces the series of the target named id (Target.ID)
	// with series, read at scrapedAt by the scraper's clock. A failed scrape
	// stores nothing: what was stored is served until it is stale.
	StoreSeries(source, id string, series []SeriesPoint, scrapedAt time.Time)
	// PruneSeries drops the series of source's targets not in keep.
	PruneSeries(source string, keep map[string]struct{})
}
