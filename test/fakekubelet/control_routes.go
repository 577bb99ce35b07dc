package fakekubelet

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// controlAPI implements the routes of NewControlHandler, for
// fakecore.Route.
type controlAPI struct{ fleet *Fleet }

func (c *controlAPI) listNodes(r *http.Request, _ fakecore.None) (any, error) {
	withPods := r.URL.Query().Get("pods") == "true"
	out := []NodeState{}
	for _, n := range c.fleet.Nodes() {
		out = append(out, n.State(withPods))
	}
	return out, nil
}

func (c *controlAPI) getNode(r *http.Request, _ fakecore.None) (any, error) {
	n, ok := c.fleet.Node(r.PathValue("node"))
	if !ok {
		return nil, fmt.Errorf("node %q: %w", r.PathValue("node"), ErrNotFound)
	}
	return n.State(true), nil
}

func (c *controlAPI) setFault(r *http.Request, req FaultRequest) (any, error) {
	fault := Fault{Kind: req.Kind, Delay: req.Delay.Duration, Bytes: req.Bytes, Offset: req.Offset.Duration, Pod: req.Pod}
	return c.forNodes(r.PathValue("node"), func(n *Node) error { return n.SetFault(fault) })
}

func (c *controlAPI) clearFault(r *http.Request, _ fakecore.None) (any, error) {
	kind := FaultKind(r.URL.Query().Get("kind"))
	return c.forNodes(r.PathValue("node"), func(n *Node) error { return n.ClearFault(kind) })
}

func (c *controlAPI) resetNode(r *http.Request, _ fakecore.None) (any, error) {
	return c.forNodes(r.PathValue("node"), func(n *Node) error { n.ResetCounters(); return nil })
}

func (c *controlAPI) putPod(r *http.Request, req PodRequest) (any, error) {
	p := Pod{Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), UID: req.UID, Labels: req.Labels}
	for _, ct := range req.Containers {
		var limit uint64
		if ct.MemoryLimit != nil && ct.MemoryLimit.Sign() > 0 {
			limit = uint64(ct.MemoryLimit.Value())
		}
		p.Containers = append(p.Containers, Container{Name: ct.Name, MemoryLimitBytes: limit})
	}
	if err := c.fleet.SetPod(r.PathValue("node"), p); err != nil {
		return nil, err
	}
	return c.getNode(r, fakecore.None{})
}

func (c *controlAPI) deletePod(r *http.Request, _ fakecore.None) (any, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if !c.fleet.RemovePod(ns, name) {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, ErrNotFound)
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
	t := UsageTarget{Namespace: req.Namespace, Container: req.Container}
	if req.Selector != "" {
		sel, err := labels.Parse(req.Selector)
		if err != nil {
			return nil, fmt.Errorf("selector: %w", err)
		}
		t.Selector = sel
	}
	return c.setUsage(t, req)
}

func (c *controlAPI) forgetUsage(*http.Request, fakecore.None) (any, error) {
	c.fleet.ForgetUsage()
	return map[string]string{}, nil
}

func (c *controlAPI) setUsage(t UsageTarget, req UsageRequest) (any, error) {
	var p usagePatch
	if req.CPU != nil {
		if req.CPU.Sign() < 0 {
			return nil, errors.New("cpu must not be negative")
		}
		v := uint64(req.CPU.ScaledValue(resource.Nano))
		p.cpu = &v
	}
	if req.Memory != nil {
		if req.Memory.Sign() < 0 {
			return nil, errors.New("memory must not be negative")
		}
		v := uint64(req.Memory.Value())
		p.memory = &v
	}
	if p.cpu == nil && p.memory == nil {
		return nil, errors.New("set cpu, memory or both")
	}
	return fakecore.Matched(c.fleet.setUsage(t, p)), nil
}

// forNodes applies fn to one node, or to every node for "*", and answers
// with the resulting states.
func (c *controlAPI) forNodes(name string, fn func(*Node) error) (any, error) {
	var nodes []*Node
	if name == "*" {
		nodes = c.fleet.Nodes()
	} else if n, ok := c.fleet.Node(name); ok {
		nodes = []*Node{n}
	} else {
		return nil, fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	out := []NodeState{}
	var errs []error
	for _, n := range nodes {
		if err := fn(n); err != nil {
			errs = append(errs, err)
		}
		out = append(out, n.State(false))
	}
	return out, errors.Join(errs...)
}
