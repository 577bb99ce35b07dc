package fakekubelet

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// StateFileName is the file in its --cert-dir where the fake-kubelet-fleet
// command writes its FleetState, last, once every node serves.
const StateFileName = "fleet.json"

// FleetState is how a fleet running as its own process tells its users
// (the demo, bench-compare) where it is, and its nodes then.
type FleetState struct {
	ControlAddress string      `json:"controlAddress"`
	CAFile         string      `json:"caFile"`
	ClientCertFile string      `json:"clientCertFile"`
	ClientKeyFile  string      `json:"clientKeyFile"`
	Nodes          []NodeState `json:"nodes"`
}

// ReadFleetState reads the FleetState in dir, once the fleet wrote it.
func ReadFleetState(dir string) (*FleetState, error) {
	return fakecore.ReadState[FleetState](filepath.Join(dir, StateFileName))
}

// UsageRequest is the body of the control API's usage calls: CPU in cores
// and Memory in bytes, each a number or a quantity; absent is unchanged.
type UsageRequest struct {
	Namespace string             `json:"namespace,omitempty"`
	Selector  string             `json:"selector,omitempty"`
	Container string             `json:"container,omitempty"`
	CPU       *resource.Quantity `json:"cpu,omitempty"`
	Memory    *resource.Quantity `json:"memory,omitempty"`
}

// NodeState describes a node for the control API; Pods without data faults.
type NodeState struct {
	Name    string           `json:"name"`
	Address string           `json:"address"`
	Port    int              `json:"port"`
	Faults  []Fault          `json:"faults,omitempty"`
	Pods    []stats.PodStats `json:"pods,omitempty"`
	NumPods int              `json:"numPods"`
}

// State returns the node's state, withPods with every pod's usage.
func (n *Node) State(withPods bool) NodeState {
	st := NodeState{Name: n.name, Address: n.Address(), Port: n.Port(), Faults: n.Faults()}
	n.fleet.mu.RLock()
	defer n.fleet.mu.RUnlock()
	st.NumPods = len(n.pods)
	if withPods {
		st.Pods = n.summaryLocked(n.fleet.tl.now(), true, Fault{}).Pods
	}
	return st
}

// NewControlHandler returns the plain-HTTP control API of a fleet
// (README.md), for a loopback address only.
func NewControlHandler(f *Fleet) http.Handler {
	mux := fakecore.NewControlMux(f.CACertPEM())
	type none = fakecore.None
	ok := http.StatusOK
	mux.HandleFunc("GET /v1/nodes", fakecore.Route(ok, func(r *http.Request, _ none) (any, error) {
		return forNodes(f, r, r.URL.Query().Get("pods") == "true", nil)
	}))
	mux.HandleFunc("GET /v1/nodes/{node}", fakecore.Route(ok, func(r *http.Request, _ none) (any, error) { return nodeState(f, r) }))
	mux.HandleFunc("PUT /v1/nodes/{node}/fault", fakecore.Route(ok, func(r *http.Request, fault Fault) (any, error) {
		return forNodes(f, r, false, func(n *Node) error { return n.SetFault(fault) })
	}))
	mux.HandleFunc("DELETE /v1/nodes/{node}/fault", fakecore.Route(ok, func(r *http.Request, _ none) (any, error) {
		return forNodes(f, r, false, func(n *Node) error { return n.ClearFault(FaultKind(r.URL.Query().Get("kind"))) })
	}))
	mux.HandleFunc("POST /v1/nodes/{node}/counter-reset", fakecore.Route(ok, func(r *http.Request, _ none) (any, error) {
		return forNodes(f, r, false, func(n *Node) error { n.ResetCounters(); return nil })
	}))
	mux.HandleFunc("PUT /v1/nodes/{node}/pods/{namespace}/{name}", fakecore.Route(ok, func(r *http.Request, p Pod) (any, error) {
		p.Namespace, p.Name = r.PathValue("namespace"), r.PathValue("name")
		if err := f.SetPod(r.PathValue("node"), p); err != nil {
			return nil, err
		}
		return nodeState(f, r)
	}))
	mux.HandleFunc("DELETE /v1/namespaces/{namespace}/pods/{name}", fakecore.Route(ok, func(r *http.Request, _ none) (any, error) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		if !f.RemovePod(ns, name, "") {
			return nil, fmt.Errorf("pod %s/%s: %w", ns, name, fakecore.ErrNotFound)
		}
		return fakecore.Matched(1), nil
	}))
	mux.HandleFunc("PUT /v1/namespaces/{namespace}/pods/{name}/usage", fakecore.Route(ok, func(r *http.Request, req UsageRequest) (any, error) {
		return setUsage(f, UsageTarget{Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Container: req.Container}, req)
	}))
	mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{name}/counter-reset", fakecore.Route(ok, func(r *http.Request, _ none) (any, error) {
		return fakecore.Matched(1), f.ResetPodCounters(r.PathValue("namespace"), r.PathValue("name"))
	}))
	mux.HandleFunc("PUT /v1/usage", fakecore.Route(ok, func(_ *http.Request, req UsageRequest) (any, error) {
		sel, err := labels.Parse(req.Selector) // "" selects every pod
		if err != nil {
			return nil, fmt.Errorf("selector: %w", err)
		}
		return setUsage(f, UsageTarget{Namespace: req.Namespace, Selector: sel, Container: req.Container}, req)
	}))
	mux.HandleFunc("DELETE /v1/usage", fakecore.Route(ok, func(*http.Request, none) (any, error) { f.ForgetUsage(); return map[string]string{}, nil }))
	return mux
}

func nodeState(f *Fleet, r *http.Request) (any, error) {
	n, ok := f.Node(r.PathValue("node"))
	if !ok {
		return nil, fmt.Errorf("node %q: %w", r.PathValue("node"), fakecore.ErrNotFound)
	}
	return n.State(true), nil
}

func setUsage(f *Fleet, t UsageTarget, req UsageRequest) (any, error) {
	cpu, errCPU := nonNegative("cpu", req.CPU, resource.Nano)
	memory, errMemory := nonNegative("memory", req.Memory, 0)
	if err := errors.Join(errCPU, errMemory); err != nil {
		return nil, err
	}
	if cpu == nil && memory == nil {
		return nil, errors.New("set cpu, memory or both")
	}
	return fakecore.Matched(f.setUsage(usageRule{UsageTarget: t, cpu: cpu, memory: memory})), nil
}

// nonNegative returns q in units of scale (nil for nil), or an error
// naming what for a negative q.
func nonNegative(what string, q *resource.Quantity, scale resource.Scale) (*uint64, error) {
	switch {
	case q == nil:
		return nil, nil
	case q.Sign() < 0:
		return nil, fmt.Errorf("%s must not be negative", what)
	}
	return ptr.To(uint64(q.ScaledValue(scale))), nil
}

// forNodes applies fn, if set, to the request's node, or to every node (for
// "*" or none), and answers with the resulting states.
func forNodes(f *Fleet, r *http.Request, withPods bool, fn func(*Node) error) (any, error) {
	nodes := f.Nodes()
	if name := r.PathValue("node"); name != "" && name != "*" {
		n, ok := f.Node(name)
		if !ok {
			return nil, fmt.Errorf("node %q: %w", name, fakecore.ErrNotFound)
		}
		nodes = []*Node{n}
	}
	out := []NodeState{}
	var errs []error
	for _, n := range nodes {
		if fn != nil {
			errs = append(errs, fn(n))
		}
		out = append(out, n.State(withPods))
	}
	return out, errors.Join(errs...)
}
