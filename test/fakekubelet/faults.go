package fakekubelet

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// FaultKind names a misbehaviour of a node: one of fakecore's, or one of
// the kubelet's own below.
type FaultKind = fakecore.FaultKind

// The faults a node can be given are fakecore's, in its groups, and these;
// faults of different groups compose. Under ClockBackwards a node's samples
// carry times earlier than the fleet's clock, and counters read at those
// times. Of the response faults the last one
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

// Fault is a fault to set on a node, or one in force; as JSON, the body of
// PUT /v1/nodes/{node}/fault. A node's faults take no Path.
type Fault = fakecore.Fault

// Groups of faults of which one at most is in force; every other kind is a
// group of its own.
const (
	responseFaults  FaultKind = "response"
	transportFaults FaultKind = "transport"
)

// faultGroup returns the group of a known kind, and false for an unknown
// one.
func faultGroup(k FaultKind) (FaultKind, bool) {
	switch k {
	case fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultHugeBody, fakecore.FaultResetConnection, fakecore.FaultStall, fakecore.FaultTruncated:
		return responseFaults, true
	case fakecore.FaultUntrustedCertificate, fakecore.FaultWrongNameCertificate, fakecore.FaultHandshakeStall:
		return transportFaults, true
	case fakecore.FaultSlow, fakecore.FaultClockBackwards, fakecore.FaultCounterReset, FaultDead, FaultDuplicatePods, FaultForeignPods:
		return k, true
	}
	return "", false
}

// Faults returns the faults in force, ordered by kind.
func (n *Node) Faults() []Fault {
	n.fleet.mu.RLock()
	defer n.fleet.mu.RUnlock()
	return slices.SortedFunc(maps.Values(n.faults), func(a, b Fault) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
}

// SetFault sets a fault, effective for requests that arrive afterwards
// (connections, for connection faults).
func (n *Node) SetFault(f Fault) error {
	group, ok := faultGroup(f.Kind)
	if !ok {
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if err := f.Check(); err != nil {
		return err
	}
	switch {
	case f.Path != "":
		return fmt.Errorf("fault %s: a node's faults take no path", f.Kind)
	case f.Kind == FaultDuplicatePods:
		if ns, name, ok := strings.Cut(f.Pod, "/"); f.Pod != "" && (!ok || ns == "" || name == "") {
			return fmt.Errorf("fault %s: pod %q is not namespace/name", f.Kind, f.Pod)
		}
	case f.Kind == fakecore.FaultCounterReset:
		n.ResetCounters()
		return nil
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if group == transportFaults {
		if err := n.ep.SetFault(f.Kind); err != nil {
			return fmt.Errorf("node %q: %w", n.name, err)
		}
	}
	n.fleet.mu.Lock()
	n.faults[group] = f
	n.fleet.mu.Unlock()
	if f.Kind == FaultDead {
		return n.ep.SetDown(true)
	}
	return nil
}

// ClearFault removes one fault; an empty kind removes them all. Clearing
// Dead listens again on the same port.
func (n *Node) ClearFault(kind FaultKind) error {
	group, ok := faultGroup(kind)
	if !ok && kind != "" {
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.fleet.mu.Lock()
	_, wasDead := n.faults[FaultDead]
	for g, f := range n.faults {
		if kind == "" || g == group && f.Kind == kind {
			delete(n.faults, g)
		}
	}
	transport := n.faults[transportFaults].Kind
	_, dead := n.faults[FaultDead]
	n.fleet.mu.Unlock()
	if err := n.ep.SetFault(transport); err != nil {
		return fmt.Errorf("node %q: %w", n.name, err)
	}
	if !wasDead || dead {
		return nil
	}
	if n.fleet.ctx.Err() != nil {
		return errors.New("fleet is closed")
	}
	if err := n.ep.SetDown(false); err != nil {
		n.fleet.mu.Lock()
		n.faults[FaultDead] = Fault{Kind: FaultDead}
		n.fleet.mu.Unlock()
		return fmt.Errorf("revive node %q: %w", n.name, err)
	}
	return nil
}

// serveFault applies the node's response faults to a request. It reports
// whether the request was answered (or abandoned) by a fault.
func (n *Node) serveFault(w http.ResponseWriter, r *http.Request, path string) bool {
	n.fleet.mu.RLock()
	faults := maps.Clone(n.faults)
	n.fleet.mu.RUnlock()
	rs := fakecore.Responder{Clock: n.fleet.cfg.Clock, Stop: n.ep.Stopped()}
	if d := faults[fakecore.FaultSlow].Delay.Duration; d > 0 {
		rs.Wait(r.Context(), d)
	}
	fault, ok := faults[responseFaults]
	if !ok {
		return false
	}
	f := fakecore.Format{
		ContentType: contentTypes[path],
		Status500: func(w http.ResponseWriter) {
			http.Error(w, "Internal Error: failed to get node info: fake kubelet fault", http.StatusInternalServerError)
		},
		Garbage:     `{"node":{"nodeName":"` + n.name + `","cpu":{"time":"yesterday","usageNanoCores":-"}},"pods":[{` + "\x00\xff",
		StallPrefix: `{"node":{"nodeName":"` + n.name + `",`,
		Render: func() (int, []byte) {
			var body bytes.Buffer
			_ = n.render(&body, r, path)
			return http.StatusOK, body.Bytes()
		},
	}
	if path != summaryPath {
		f.Garbage = "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total{ 1.0.0 not-a-number\n\x00\xff"
		f.StallPrefix = "# HELP "
	}
	return rs.Serve(w, r, fault.Kind, fault.Bytes, f)
}
