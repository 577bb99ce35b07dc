package fakeukpd

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/util/cert"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// Options say how Start serves a fake ukpd.
type Options struct {
	Config
	// Listen is the platform API's loopback host:port and ControlAddress
	// the control API's (127.0.0.1:0 when empty). Any address of
	// 127.0.0.0/8 serves on Linux without setup, so fakes of several hosts
	// can share a port number.
	Listen, ControlAddress string
	// CertDir, when set, serves TLS with a new CA written to
	// <CertDir>/ca.crt; plain HTTP when empty.
	CertDir string
}

// State is where a started fake ukpd serves. The fake-ukpd command writes
// it to its --state-file; read it with fakecore.ReadState.
type State struct {
	URL            string `json:"url"`
	ControlAddress string `json:"controlAddress"`
	CAFile         string `json:"caFile,omitempty"`
}

// Running is a fake ukpd serving its platform API and its control API
// (README.md); State says where.
type Running struct {
	*Server
	State
	api            *fakecore.Endpoint // with TLS, else plain
	plain, control *fakecore.HTTPServer
}

func Start(opts Options) (_ *Running, err error) {
	opts.Listen, opts.ControlAddress = cmp.Or(opts.Listen, "127.0.0.1:0"), cmp.Or(opts.ControlAddress, "127.0.0.1:0")
	if err := errors.Join(opts.Check(), fakecore.CheckLoopback("listen", opts.Listen), fakecore.CheckLoopback("control-address", opts.ControlAddress)); err != nil {
		return nil, err
	}
	r := &Running{Server: New(opts.Config)}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
		}
	}()
	var caPEM []byte
	if opts.CertDir == "" {
		var addr string
		if r.plain, addr, err = fakecore.Listen(opts.Listen, r.Server); err != nil {
			return nil, err
		}
		r.URL = "http://" + addr
	} else {
		var ca *pki.CA
		if ca, err = pki.NewCA("fake-ukpd-ca", time.Now(), fakecore.CAValidity); err != nil {
			return nil, err
		}
		leaf := pki.Leaf{CommonName: "fake-ukpd", Hosts: []string{"127.0.0.1", "::1", "localhost"}, Server: true}
		if host, _, _ := net.SplitHostPort(opts.Listen); !slices.Contains(leaf.Hosts, host) {
			leaf.Hosts = append(leaf.Hosts, host)
		}
		if r.api, err = fakecore.NewEndpoint(fakecore.EndpointConfig{Addr: opts.Listen, Handler: r.Server, CA: ca, Leaf: leaf}); err != nil {
			return nil, err
		}
		caPEM, r.URL, r.CAFile = ca.CertPEM(), "https://"+r.api.Addr(), filepath.Join(opts.CertDir, "ca.crt")
		if err = cert.WriteCert(r.CAFile, caPEM); err != nil {
			return nil, err
		}
	}
	r.control, r.ControlAddress, err = fakecore.Listen(opts.ControlAddress, NewControlHandler(r.Server, caPEM))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// SetTransportFault breaks the platform API below HTTP (Refused, or TLS),
// with TLS only; "" serves it again, on the same address.
func (r *Running) SetTransportFault(kind fakecore.FaultKind) error {
	if r.api == nil {
		return fmt.Errorf("transport fault %q: serving plain HTTP", kind)
	}
	if kind == fakecore.FaultRefused {
		return r.api.SetDown(true)
	}
	// While down, a new fault is set before the endpoint listens again.
	if err := r.api.SetFault(kind); err != nil {
		return err
	}
	return r.api.SetDown(false)
}

// HeldConnections is how many connections a HandshakeStall holds now.
func (r *Running) HeldConnections() int {
	if r.api == nil {
		return 0
	}
	return r.api.Held()
}

// Close stops both APIs and ends the requests a slow fault holds.
func (r *Running) Close() error {
	r.Server.Close()
	var errs []error
	if r.api != nil {
		errs = append(errs, r.api.Close())
	}
	for _, s := range []*fakecore.HTTPServer{r.plain, r.control} {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}

// InstanceRequest is the body of POST /v1/instances on the control API:
// CPU in cores and Memory (the resident set) in bytes, each a number or a
// quantity.
type InstanceRequest struct {
	InstanceSpec
	CPU    *resource.Quantity `json:"cpu,omitempty"`
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// UsageRequest is the body of the control API's usage calls; absent is
// unchanged, and Container limits a pod call to one container.
type UsageRequest struct {
	Container string             `json:"container,omitempty"`
	CPU       *resource.Quantity `json:"cpu,omitempty"`
	Memory    *resource.Quantity `json:"memory,omitempty"`
}

// NewControlHandler returns the plain-HTTP control API of s (README.md),
// with caPEM, if not nil, on /v1/ca.crt; for a loopback address only.
func NewControlHandler(s *Server, caPEM []byte) http.Handler {
	c := &control{s: s}
	ok := http.StatusOK
	mux := fakecore.NewControlMux(caPEM)
	get := func(v func() any) http.HandlerFunc {
		return fakecore.Route(ok, func(*http.Request, fakecore.None) (any, error) { return v(), nil })
	}
	mux.HandleFunc("GET /v1/instances", get(func() any { return s.Instances() }))
	mux.HandleFunc("POST /v1/instances", fakecore.Route(http.StatusCreated, c.addInstance))
	mux.HandleFunc("GET /v1/instances/{id}", fakecore.Route(ok, c.byID(nil)))
	mux.HandleFunc("DELETE /v1/instances/{id}", fakecore.Route(ok, c.byID(s.Remove)))
	mux.HandleFunc("PUT /v1/instances/{id}/usage", fakecore.Route(ok, c.usage))
	for op, do := range map[string]func(id string) error{"restart": s.Restart, "standby": s.Standby, "stop": s.Stop, "drain": s.Drain} {
		mux.HandleFunc("POST /v1/instances/{id}/"+op, fakecore.Route(ok, c.byID(do)))
		mux.HandleFunc("POST /v1/namespaces/{namespace}/pods/{pod}/"+op, fakecore.Route(ok, c.byPod(do)))
	}
	mux.HandleFunc("PUT /v1/namespaces/{namespace}/pods/{pod}/usage", fakecore.Route(ok, c.usage))
	mux.HandleFunc("DELETE /v1/namespaces/{namespace}/pods/{pod}", fakecore.Route(ok, c.byPod(s.Remove)))
	mux.HandleFunc("GET /v1/clients", get(func() any { return s.Clients() }))
	mux.HandleFunc("GET /v1/fault", get(func() any { return s.Faults() }))
	mux.HandleFunc("PUT /v1/fault", fakecore.Route(ok, func(_ *http.Request, f Fault) (any, error) { err := s.SetFault(f); return s.Faults(), err }))
	mux.HandleFunc("DELETE /v1/fault", fakecore.Route(ok, func(r *http.Request, _ fakecore.None) (any, error) {
		s.ClearFault(FaultKind(r.URL.Query().Get("kind")))
		return s.Faults(), nil
	}))
	return mux
}

// control implements the routes of NewControlHandler, for fakecore.Route.
type control struct{ s *Server }

func (c *control) addInstance(_ *http.Request, req InstanceRequest) (any, error) {
	spec := req.InstanceSpec
	if req.CPU != nil {
		spec.CPUCores = req.CPU.AsApproximateFloat64()
	}
	if req.Memory != nil {
		spec.RSSBytes = uint64(max(req.Memory.Value(), 0))
	}
	return c.s.AddInstance(spec)
}

// byID runs op, if not nil, on the instance named in the path and answers
// its state, or for a removal how many it matched.
func (c *control) byID(op func(string) error) func(*http.Request, fakecore.None) (any, error) {
	return func(r *http.Request, _ fakecore.None) (any, error) {
		id := r.PathValue("id")
		if op != nil {
			if err := op(id); err != nil {
				return nil, err
			}
		}
		if r.Method == http.MethodDelete {
			return fakecore.Matched(1), nil
		}
		return c.s.Instance(id)
	}
}

// byPod runs op on every instance of the pod in the path, or of one
// container with ?container=.
func (c *control) byPod(op func(string) error) func(*http.Request, fakecore.None) (any, error) {
	return func(r *http.Request, _ fakecore.None) (any, error) {
		return c.forPod(r, r.URL.Query().Get("container"), op)
	}
}

// forPod runs op on every instance of the pod in the path (of container,
// if not empty) and answers how many it matched.
func (c *control) forPod(r *http.Request, container string, op func(string) error) (any, error) {
	ns, pod := r.PathValue("namespace"), r.PathValue("pod")
	ids := c.s.InstancesOf(ns, pod, container)
	if len(ids) == 0 {
		return nil, fmt.Errorf("instances of pod %s/%s: %w", ns, pod, fakecore.ErrNotFound)
	}
	for _, id := range ids {
		if err := op(id); err != nil {
			return nil, err
		}
	}
	return fakecore.Matched(len(ids)), nil
}

// usage sets what req gives on the instance in the path, or on the pod's
// instances (of req.Container, if not empty).
func (c *control) usage(r *http.Request, req UsageRequest) (any, error) {
	set := func(id string) error { return c.setUsage(id, req) }
	if r.PathValue("id") != "" {
		return c.byID(set)(r, fakecore.None{})
	}
	return c.forPod(r, req.Container, set)
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
