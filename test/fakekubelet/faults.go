package fakekubelet

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// FaultKind names a misbehaviour of a node: one of fakecore's, or one of
// the kubelet's own below.
type FaultKind = fakecore.FaultKind

// The faults a node can be given are fakecore's, in its groups, and these;
// faults of different groups compose. Of the response faults the last one
// set wins, and so of the transport faults; setting or clearing one of
// those drops the node's open connections, so that clients meet it on
// their next request.
const (
	// FaultDead closes the listener.
	FaultDead FaultKind = "Dead"
	// FaultDuplicatePods lists one pod of the node (or every one) twice.
	FaultDuplicatePods FaultKind = "DuplicatePods"
	// FaultForeignPods lists the pods of the fleet's other nodes too.
	FaultForeignPods FaultKind = "ForeignPods"
)

// AllPods is FaultState.DuplicatePods when every pod of the node is listed
// twice.
const AllPods = "*"

// Fault is a fault to set on a node.
type Fault struct {
	Kind FaultKind
	// Delay is the wait before responding, for Slow.
	Delay time.Duration
	// Bytes is the body size for HugeBody; 0 means fakecore.DefaultHugeBodyBytes.
	Bytes int64
	// Offset is how far the node's clock goes back, for ClockBackwards.
	Offset time.Duration
	// Pod limits DuplicatePods to one pod, "namespace/name"; empty means
	// every pod of the node.
	Pod string
}

// Slow delays every response by d (until the request is cancelled).
func Slow(d time.Duration) Fault { return Fault{Kind: fakecore.FaultSlow, Delay: d} }

// HugeBody answers 200 with a body of n bytes, streamed.
func HugeBody(n int64) Fault { return Fault{Kind: fakecore.FaultHugeBody, Bytes: n} }

// ClockBackwards sets the node's clock d back: its samples carry times d
// earlier than the fleet's clock (whole seconds), and counters read at those
// times, until the fault is cleared.
func ClockBackwards(d time.Duration) Fault {
	return Fault{Kind: fakecore.FaultClockBackwards, Offset: d}
}

// FaultState is the set of faults in force on a node.
type FaultState struct {
	Delay         metav1.Duration `json:"delay,omitzero"`
	Response      FaultKind       `json:"response,omitempty"`
	HugeBodyBytes int64           `json:"hugeBodyBytes,omitempty"`
	Dead          bool            `json:"dead,omitempty"`
	// Connection is the connection fault in force.
	Connection FaultKind `json:"connection,omitempty"`
	// ClockOffset is how far back the node's clock is.
	ClockOffset metav1.Duration `json:"clockOffset,omitzero"`
	// DuplicatePods is "namespace/name" of the pod listed twice, AllPods,
	// or empty.
	DuplicatePods string `json:"duplicatePods,omitempty"`
	// ForeignPods lists the pods of the fleet's other nodes too.
	ForeignPods bool `json:"foreignPods,omitempty"`
}

// Faults returns the faults in force.
func (n *Node) Faults() FaultState {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.faults
}

// SetFault sets a fault, effective for requests that arrive afterwards
// (connections, for connection faults).
func (n *Node) SetFault(f Fault) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	var set func(s *FaultState)
	switch f.Kind {
	case fakecore.FaultSlow:
		if f.Delay <= 0 {
			return fmt.Errorf("fault %s needs a positive delay", f.Kind)
		}
		set = func(s *FaultState) { s.Delay.Duration = f.Delay }
	case fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultHugeBody, fakecore.FaultResetConnection, fakecore.FaultStall, fakecore.FaultTruncated:
		size := int64(0)
		if f.Kind == fakecore.FaultHugeBody {
			size = cmp.Or(max(f.Bytes, 0), fakecore.DefaultHugeBodyBytes)
		}
		set = func(s *FaultState) { s.Response, s.HugeBodyBytes = f.Kind, size }
	case fakecore.FaultUntrustedCertificate, fakecore.FaultWrongNameCertificate, fakecore.FaultHandshakeStall:
		if err := n.ep.SetFault(f.Kind); err != nil {
			return fmt.Errorf("node %q: %w", n.name, err)
		}
		set = func(s *FaultState) { s.Connection = f.Kind }
	case fakecore.FaultClockBackwards:
		if f.Offset < time.Second {
			return fmt.Errorf("fault %s needs an offset of at least 1s", f.Kind)
		}
		set = func(s *FaultState) { s.ClockOffset.Duration = f.Offset }
	case FaultDuplicatePods:
		if ns, name, ok := strings.Cut(f.Pod, "/"); f.Pod != "" && (!ok || ns == "" || name == "") {
			return fmt.Errorf("fault %s: pod %q is not namespace/name", f.Kind, f.Pod)
		}
		set = func(s *FaultState) { s.DuplicatePods = cmp.Or(f.Pod, AllPods) }
	case FaultForeignPods:
		set = func(s *FaultState) { s.ForeignPods = true }
	case FaultDead:
		set = func(s *FaultState) { s.Dead = true }
	case fakecore.FaultCounterReset:
		n.ResetCounters()
		return nil
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	n.mu.Lock()
	set(&n.faults)
	n.mu.Unlock()
	if f.Kind == FaultDead {
		return n.ep.SetDown(true)
	}
	return nil
}

// ClearFault removes one fault; an empty kind removes them all. Clearing
// Dead listens again on the same port.
func (n *Node) ClearFault(kind FaultKind) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.mu.Lock()
	was := n.faults
	switch kind {
	case "":
		n.faults = FaultState{}
	case fakecore.FaultSlow:
		n.faults.Delay.Duration = 0
	case fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultHugeBody, fakecore.FaultResetConnection, fakecore.FaultStall, fakecore.FaultTruncated:
		if n.faults.Response == kind {
			n.faults.Response, n.faults.HugeBodyBytes = "", 0
		}
	case fakecore.FaultUntrustedCertificate, fakecore.FaultWrongNameCertificate, fakecore.FaultHandshakeStall:
		if n.faults.Connection == kind {
			n.faults.Connection = ""
		}
	case fakecore.FaultClockBackwards:
		n.faults.ClockOffset.Duration = 0
	case FaultDuplicatePods:
		n.faults.DuplicatePods = ""
	case FaultForeignPods:
		n.faults.ForeignPods = false
	case FaultDead:
		n.faults.Dead = false
	case fakecore.FaultCounterReset:
	default:
		n.mu.Unlock()
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	now := n.faults
	n.mu.Unlock()
	if was.Connection != now.Connection {
		if err := n.ep.SetFault(now.Connection); err != nil {
			return fmt.Errorf("node %q: %w", n.name, err)
		}
	}
	if was.Dead && !now.Dead {
		if n.fleet.isClosed() {
			return errors.New("fleet is closed")
		}
		if err := n.ep.SetDown(false); err != nil {
			n.mu.Lock()
			n.faults.Dead = true
			n.mu.Unlock()
			return fmt.Errorf("revive node %q: %w", n.name, err)
		}
	}
	return nil
}
