package fakekubelet

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// controlAPI implements the routes of NewControlHandler.
type controlAPI struct{ fleet *Fleet }

func (c *controlAPI) listNodes(w http.ResponseWriter, r *http.Request) {
	withPods := r.URL.Query().Get("pods") == "true"
	out := []NodeState{}
	for _, n := range c.fleet.Nodes() {
		out = append(out, n.State(withPods))
	}
	fakecore.WriteJSON(w, http.StatusOK, out)
}

func (c *controlAPI) getNode(w http.ResponseWriter, r *http.Request) {
	n, ok := c.fleet.Node(r.PathValue("node"))
	if !ok {
		fakecore.WriteError(w, http.StatusNotFound, fmt.Errorf("node %q: %w", r.PathValue("node"), ErrNotFound))
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, n.State(true))
}

func (c *controlAPI) setFault(w http.ResponseWriter, r *http.Request) {
	var req FaultRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	fault := Fault{Kind: req.Kind, Delay: req.Delay.Duration, Bytes: req.Bytes, Offset: req.Offset.Duration, Pod: req.Pod}
	c.forNodes(w, r.PathValue("node"), func(n *Node) error { return n.SetFault(fault) })
}

func (c *controlAPI) clearFault(w http.ResponseWriter, r *http.Request) {
	kind := FaultKind(r.URL.Query().Get("kind"))
	c.forNodes(w, r.PathValue("node"), func(n *Node) error { return n.ClearFault(kind) })
}

func (c *controlAPI) resetNode(w http.ResponseWriter, r *http.Request) {
	c.forNodes(w, r.PathValue("node"), func(n *Node) error { n.ResetCounters(); return nil })
}

func (c *controlAPI) putPod(w http.ResponseWriter, r *http.Request) {
	var req PodRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	p := Pod{Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), UID: req.UID, Labels: req.Labels}
	for _, ct := range req.Containers {
		var limit uint64
		if ct.MemoryLimit != nil && ct.MemoryLimit.Sign() > 0 {
			limit = uint64(ct.MemoryLimit.Value())
		}
		p.Containers = append(p.Containers, Container{Name: ct.Name, MemoryLimitBytes: limit})
	}
	node := r.PathValue("node")
	if err := c.fleet.SetPod(node, p); err != nil {
		fakecore.WriteError(w, http.StatusNotFound, err)
		return
	}
	n, _ := c.fleet.Node(node)
	fakecore.WriteJSON(w, http.StatusOK, n.State(true))
}

func (c *controlAPI) deletePod(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if !c.fleet.RemovePod(ns, name) {
		fakecore.WriteError(w, http.StatusNotFound, fmt.Errorf("pod %s/%s: %w", ns, name, ErrNotFound))
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, map[string]int{"matched": 1})
}

func (c *controlAPI) setPodUsage(w http.ResponseWriter, r *http.Request) {
	var req UsageRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	c.setUsage(w, UsageTarget{Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Container: req.Container}, req)
}

func (c *controlAPI) resetPod(w http.ResponseWriter, r *http.Request) {
	if err := c.fleet.ResetPodCounters(r.PathValue("namespace"), r.PathValue("name")); err != nil {
		fakecore.WriteError(w, http.StatusNotFound, err)
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, map[string]int{"matched": 1})
}

func (c *controlAPI) setSelectorUsage(w http.ResponseWriter, r *http.Request) {
	var req UsageRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	t := UsageTarget{Namespace: req.Namespace, Container: req.Container}
	if req.Selector != "" {
		sel, err := labels.Parse(req.Selector)
		if err != nil {
			fakecore.WriteError(w, http.StatusBadRequest, fmt.Errorf("selector: %w", err))
			return
		}
		t.Selector = sel
	}
	c.setUsage(w, t, req)
}

func (c *controlAPI) forgetUsage(w http.ResponseWriter, _ *http.Request) {
	c.fleet.ForgetUsage()
	fakecore.WriteJSON(w, http.StatusOK, map[string]string{})
}

func (c *controlAPI) setUsage(w http.ResponseWriter, t UsageTarget, req UsageRequest) {
	var p usagePatch
	if req.CPU != nil {
		if req.CPU.Sign() < 0 {
			fakecore.WriteError(w, http.StatusBadRequest, errors.New("cpu must not be negative"))
			return
		}
		v := uint64(req.CPU.ScaledValue(resource.Nano))
		p.cpu = &v
	}
	if req.Memory != nil {
		if req.Memory.Sign() < 0 {
			fakecore.WriteError(w, http.StatusBadRequest, errors.New("memory must not be negative"))
			return
		}
		v := uint64(req.Memory.Value())
		p.memory = &v
	}
	if p.cpu == nil && p.memory == nil {
		fakecore.WriteError(w, http.StatusBadRequest, errors.New("set cpu, memory or both"))
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, map[string]int{"matched": c.fleet.setUsage(t, p)})
}

// forNodes applies fn to one node, or to every node for "*", and answers
// with the resulting states.
func (c *controlAPI) forNodes(w http.ResponseWriter, name string, fn func(*Node) error) {
	var nodes []*Node
	if name == "*" {
		nodes = c.fleet.Nodes()
	} else if n, ok := c.fleet.Node(name); ok {
		nodes = []*Node{n}
	} else {
		fakecore.WriteError(w, http.StatusNotFound, fmt.Errorf("node %q: %w", name, ErrNotFound))
		return
	}
	out := []NodeState{}
	var errs []error
	for _, n := range nodes {
		if err := fn(n); err != nil {
			errs = append(errs, err)
		}
		out = append(out, n.State(false))
	}
	if err := errors.Join(errs...); err != nil {
		fakecore.WriteError(w, http.StatusBadRequest, err)
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, out)
}
