package fakekubelet

import (
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// UsageRequest is the body of the control API's usage calls. CPU is in
// cores and Memory in bytes, each a number or a Kubernetes quantity
// ("250m", "1.5", "128Mi"); an absent field is left unchanged.
type UsageRequest struct {
	Namespace string             `json:"namespace,omitempty"`
	Selector  string             `json:"selector,omitempty"`
	Container string             `json:"container,omitempty"`
	CPU       *resource.Quantity `json:"cpu,omitempty"`
	Memory    *resource.Quantity `json:"memory,omitempty"`
}

// NodeState describes a node for the control API; its pods are as the
// Summary API lists them now, without data faults.
type NodeState struct {
	Name    string           `json:"name"`
	Address string           `json:"address"`
	Port    int              `json:"port"`
	Faults  []Fault          `json:"faults,omitempty"`
	Pods    []stats.PodStats `json:"pods,omitempty"`
	NumPods int              `json:"numPods"`
}

// State returns the node's state; withPods adds every pod's usage.
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

// NewControlHandler returns the plain-HTTP control API of a fleet (see
// README.md). Serve it on a loopback address only.
func NewControlHandler(f *Fleet) http.Handler {
	c := &controlAPI{fleet: f}
	mux := fakecore.NewControlMux(f.CACertPEM())
	ok := http.StatusOK
	mux.HandleFunc("GET /v1/nodes", fakecore.Route(ok, c.listNodes))
	mux.HandleFunc("GET /v1/nodes/{node}", fakecore.Route(ok, c.getNode))
	mux.HandleFunc("PUT /v1/nodes/{node}/fault", fakecore.Route(ok, c.setFault))
	mux.HandleFunc("DELETE /v1/nodes/{node}/fault", fakecore.Route(ok, c.clearFault))
	mux.HandleFunc("POST /v1/nodes/{node}/counter-reset", fakecore.Route(ok, c.resetNode))
	mux.HandleFunc("PUT /v1/nodes/{node}/pods/{namespace}/{name}", fakecore.Route(ok, c.putPod))
	mux.HandleFunc("DELETE /v1/namespaces/{namespace}/pods/{name}", fakecore.Route(ok, c.deletePod))
	mux.HandleFunc("PUT /v1/namespaces/{namespace}/pods/{name}/usage", fakecore.Route(ok, c.setPodUsage))
	mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{name}/counter-reset", fakecore.Route(ok, c.resetPod))
	mux.HandleFunc("PUT /v1/usage", fakecore.Route(ok, c.setSelectorUsage))
	mux.HandleFunc("DELETE /v1/usage", fakecore.Route(ok, c.forgetUsage))
	return mux
}

// controlAPI implements the routes of NewControlHandler, for
// fakecore.Route.
type controlAPI struct{ fleet *Fleet }

func (c *controlAPI) listNodes(r *http.Request, _ fakecore.None) (any, error) {
	return c.forNodes("*", r.URL.Query().Get("pods") == "true", nil)
}

func (c *controlAPI) getNode(r *http.Request, _ fakecore.None) (any, error) {
	n, ok := c.fleet.Node(r.PathValue("node"))
	if !ok {
		return nil, fmt.Errorf("node %q: %w", r.PathValue("node"), fakecore.ErrNotFound)
	}
	return n.State(true), nil
}

func (c *controlAPI) setFault(r *http.Request, fault Fault) (any, error) {
	return c.forNodes(r.PathValue("node"), false, func(n *Node) error { return n.SetFault(fault) })
}

func (c *controlAPI) clearFault(r *http.Request, _ fakecore.None) (any, error) {
	kind := FaultKind(r.URL.Query().Get("kind"))
	return c.forNodes(r.PathValue("node"), false, func(n *Node) error { return n.ClearFault(kind) })
}

func (c *controlAPI) resetNode(r *http.Request, _ fakecore.None) (any, error) {
	return c.forNodes(r.PathValue("node"), false, func(n *Node) error { n.ResetCounters(); return nil })
}

func (c *controlAPI) putPod(r *http.Request, p Pod) (any, error) {
	p.Namespace, p.Name = r.PathValue("namespace"), r.PathValue("name")
	if err := c.fleet.SetPod(r.PathValue("node"), p); err != nil {
		return nil, err
	}
	return c.getNode(r, fakecore.None{})
}

func (c *controlAPI) deletePod(r *http.Request, _ fakecore.None) (any, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if !c.fleet.RemovePod(ns, name, "") {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, fakecore.ErrNotFound)
	}
	return fakecore.Matched(1), nil
}

func (c *controlAPI) setPodUsage(r *http.Request, req UsageRequest) (any, error) {
	return c.setUsage(UsageTarget{Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Container: req.Container}, req)
}

func (c *controlAPI) resetPod(r *http.Request, _ fakecore.None) (any, error) {
	return fakecore.Matched(1), c.fleet.ResetPodCounters(r.PathValue("namespace"), r.PathValue("name"))
}

func (c *controlAPI) setSelectorUsage(_ *http.Request, req UsageRequest) (any, error) {
	sel, err := labels.Parse(req.Selector) // "" selects every pod
	if err != nil {
		return nil, fmt.Errorf("selector: %w", err)
	}
	return c.setUsage(UsageTarget{Namespace: req.Namespace, Selector: sel, Container: req.Container}, req)
}

func (c *controlAPI) forgetUsage(*http.Request, fakecore.None) (any, error) {
	c.fleet.ForgetUsage()
	return map[string]string{}, nil
}

func (c *controlAPI) setUsage(t UsageTarget, req UsageRequest) (any, error) {
	cpu, errCPU := nonNegative("cpu", req.CPU, resource.Nano)
	memory, errMemory := nonNegative("memory", req.Memory, 0)
	if err := errors.Join(errCPU, errMemory); err != nil {
		return nil, err
	}
	if cpu == nil && memory == nil {
		return nil, errors.New("set cpu, memory or both")
	}
	return fakecore.Matched(c.fleet.setUsage(usageRule{UsageTarget: t, cpu: cpu, memory: memory})), nil
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
	v := uint64(q.ScaledValue(scale))
	return &v, nil
}

// forNodes applies fn, if set, to one node, or to every node for "*", and
// answers with the resulting states, with their pods if withPods.
func (c *controlAPI) forNodes(name string, withPods bool, fn func(*Node) error) (any, error) {
	var nodes []*Node
	if name == "*" {
		nodes = c.fleet.Nodes()
	} else if n, ok := c.fleet.Node(name); ok {
		nodes = []*Node{n}
	} else {
		return nil, fmt.Errorf("node %q: %w", name, fakecore.ErrNotFound)
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
