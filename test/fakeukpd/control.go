package fakeukpd

import (
	"errors"
	"net/http"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceRequest is the body of POST /v1/instances on the control API.
// CPU is in cores and Memory (the resident set) in bytes, each a number or
// a Kubernetes quantity ("250m", "1.5", "64Mi").
type InstanceRequest struct {
	Namespace string             `json:"namespace,omitempty"`
	Pod       string             `json:"pod,omitempty"`
	Container string             `json:"container,omitempty"`
	Node      string             `json:"node,omitempty"`
	Name      string             `json:"name,omitempty"`
	UUID      string             `json:"uuid,omitempty"`
	Tags      []string           `json:"tags,omitempty"`
	State     string             `json:"state,omitempty"`
	CPU       *resource.Quantity `json:"cpu,omitempty"`
	Memory    *resource.Quantity `json:"memory,omitempty"`
}

// UsageRequest is the body of the control API's usage calls; an absent
// field is left unchanged. Container limits a pod call to one container.
type UsageRequest struct {
	Container string             `json:"container,omitempty"`
	CPU       *resource.Quantity `json:"cpu,omitempty"`
	Memory    *resource.Quantity `json:"memory,omitempty"`
}

// FaultRequest is the body of PUT /v1/fault.
type FaultRequest struct {
	Kind  FaultKind       `json:"kind"`
	Path  string          `json:"path,omitempty"`
	Delay metav1.Duration `json:"delay,omitzero"`  // Go duration, for Slow
	Bytes int64           `json:"bytes,omitempty"` // for HugeBody
	// Offset is a Go duration, for ClockBackwards and ClockOffset.
	Offset metav1.Duration `json:"offset,omitzero"`
}

// NewControlHandler returns the plain-HTTP control API of s (see
// README.md). caPEM, if not nil, is served on /v1/ca.crt. Serve it on a
// loopback address only.
func NewControlHandler(s *Server, caPEM []byte) http.Handler {
	c := &control{s: s}
	mux := fakecore.NewControlMux(caPEM)
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, _ *http.Request) { fakecore.WriteJSON(w, http.StatusOK, s.Instances()) })
	mux.HandleFunc("POST /v1/instances", c.addInstance)
	mux.HandleFunc("GET /v1/instances/{id}", c.getInstance)
	mux.HandleFunc("DELETE /v1/instances/{id}", c.byID(s.Remove))
	mux.HandleFunc("PUT /v1/instances/{id}/usage", c.instanceUsage)
	mux.HandleFunc("POST /v1/instances/{id}/restart", c.byID(s.Restart))
	mux.HandleFunc("POST /v1/instances/{id}/standby", c.byID(s.Standby))
	mux.HandleFunc("POST /v1/instances/{id}/stop", c.byID(s.Stop))
	mux.HandleFunc("POST /v1/instances/{id}/drain", c.byID(s.Drain))
	mux.HandleFunc("PUT /v1/namespaces/{namespace}/pods/{pod}/usage", c.podUsage)
	mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{pod}/restart", c.byPod(s.Restart))
	mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{pod}/standby", c.byPod(s.Standby))
	mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{pod}/stop", c.byPod(s.Stop))
	mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{pod}/drain", c.byPod(s.Drain))
	mux.HandleFunc("DELETE /v1/namespaces/{namespace}/pods/{pod}", c.byPod(s.Remove))
	mux.HandleFunc("GET /v1/fault", func(w http.ResponseWriter, _ *http.Request) {
		fakecore.WriteJSON(w, http.StatusOK, faultStates(s.Faults()))
	})
	mux.HandleFunc("PUT /v1/fault", c.setFault)
	mux.HandleFunc("DELETE /v1/fault", func(w http.ResponseWriter, r *http.Request) {
		s.ClearFault(FaultKind(r.URL.Query().Get("kind")))
		fakecore.WriteJSON(w, http.StatusOK, faultStates(s.Faults()))
	})
	return mux
}

type control struct{ s *Server }

func (c *control) addInstance(w http.ResponseWriter, r *http.Request) {
	var req InstanceRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	spec := InstanceSpec{
		Namespace: req.Namespace, Pod: req.Pod, Container: req.Container, Node: req.Node,
		Name: req.Name, UUID: req.UUID, Tags: req.Tags, State: req.State,
	}
	if req.CPU != nil {
		spec.CPUCores = req.CPU.AsApproximateFloat64()
	}
	if req.Memory != nil {
		spec.RSSBytes = uint64(max(req.Memory.Value(), 0))
	}
	in, err := c.s.AddInstance(spec)
	if err != nil {
		fakecore.WriteError(w, http.StatusBadRequest, err)
		return
	}
	fakecore.WriteJSON(w, http.StatusCreated, in)
}

func (c *control) getInstance(w http.ResponseWriter, r *http.Request) {
	in, err := c.s.Instance(r.PathValue("id"))
	if err != nil {
		fakecore.WriteError(w, http.StatusNotFound, err)
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, in)
}

// byID runs op on the instance named in the path and answers its state.
func (c *control) byID(op func(string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := op(id); err != nil {
			fakecore.WriteError(w, http.StatusNotFound, err)
			return
		}
		if r.Method == http.MethodDelete {
			fakecore.WriteJSON(w, http.StatusOK, map[string]int{"matched": 1})
			return
		}
		c.getInstance(w, r)
	}
}

// byPod runs op on every instance of the pod in the path, or of one
// container with ?container=.
func (c *control) byPod(op func(string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ids := c.s.InstancesOf(r.PathValue("namespace"), r.PathValue("pod"), r.URL.Query().Get("container"))
		if len(ids) == 0 {
			fakecore.WriteError(w, http.StatusNotFound, errors.New("no instance of that pod"))
			return
		}
		for _, id := range ids {
			if err := op(id); err != nil {
				fakecore.WriteError(w, http.StatusNotFound, err)
				return
			}
		}
		fakecore.WriteJSON(w, http.StatusOK, map[string]int{"matched": len(ids)})
	}
}

func (c *control) instanceUsage(w http.ResponseWriter, r *http.Request) {
	var req UsageRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	if err := c.setUsage(id, req); err != nil {
		fakecore.WriteError(w, statusOf(err), err)
		return
	}
	c.getInstance(w, r)
}

func (c *control) podUsage(w http.ResponseWriter, r *http.Request) {
	var req UsageRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	ids := c.s.InstancesOf(r.PathValue("namespace"), r.PathValue("pod"), req.Container)
	if len(ids) == 0 {
		fakecore.WriteError(w, http.StatusNotFound, errors.New("no instance of that pod"))
		return
	}
	for _, id := range ids {
		if err := c.setUsage(id, req); err != nil {
			fakecore.WriteError(w, statusOf(err), err)
			return
		}
	}
	fakecore.WriteJSON(w, http.StatusOK, map[string]int{"matched": len(ids)})
}

func (c *control) setUsage(id string, req UsageRequest) error {
	if req.CPU != nil {
		if err := c.s.SetCPU(id, req.CPU.AsApproximateFloat64()); err != nil {
			return err
		}
	}
	if req.Memory != nil {
		if req.Memory.Sign() < 0 {
			return errors.New("memory must not be negative")
		}
		return c.s.SetRSS(id, uint64(req.Memory.Value()))
	}
	return nil
}

func (c *control) setFault(w http.ResponseWriter, r *http.Request) {
	var req FaultRequest
	if !fakecore.ReadJSON(w, r, &req) {
		return
	}
	f := Fault{Kind: req.Kind, Path: req.Path, Delay: req.Delay.Duration, Bytes: req.Bytes, Offset: req.Offset.Duration}
	if err := c.s.SetFault(f); err != nil {
		fakecore.WriteError(w, http.StatusBadRequest, err)
		return
	}
	fakecore.WriteJSON(w, http.StatusOK, faultStates(c.s.Faults()))
}

func faultStates(faults []Fault) []FaultRequest {
	out := make([]FaultRequest, 0, len(faults))
	for _, f := range faults {
		out = append(out, FaultRequest{Kind: f.Kind, Path: f.Path, Delay: metav1.Duration{Duration: f.Delay}, Bytes: f.Bytes, Offset: metav1.Duration{Duration: f.Offset}})
	}
	return out
}

func statusOf(err error) int {
	if errors.Is(err, ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}
