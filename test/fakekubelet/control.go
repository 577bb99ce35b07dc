package fakekubelet

import (
	"net/http"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// PodRequest is the body of PUT /v1/nodes/{node}/pods/{namespace}/{name},
// which places a pod without a cluster.
type PodRequest struct {
	UID        string             `json:"uid,omitempty"`
	Labels     map[string]string  `json:"labels,omitempty"`
	Containers []ContainerRequest `json:"containers,omitempty"`
}

// ContainerRequest describes a container of a PodRequest.
type ContainerRequest struct {
	Name        string             `json:"name"`
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`
}

// FaultRequest is the body of PUT /v1/nodes/{node}/fault.
type FaultRequest struct {
	Kind  FaultKind       `json:"kind"`
	Delay metav1.Duration `json:"delay,omitzero"`  // Go duration, for Slow
	Bytes int64           `json:"bytes,omitempty"` // for HugeBody
	// Offset is a Go duration, for ClockBackwards.
	Offset metav1.Duration `json:"offset,omitzero"`
	// Pod is "namespace/name", for DuplicatePods; empty means every pod.
	Pod string `json:"pod,omitempty"`
}

// NodeState describes a node for the control API.
type NodeState struct {
	Name    string     `json:"name"`
	Address string     `json:"address"`
	Port    int        `json:"port"`
	Faults  FaultState `json:"faults"`
	Pods    []PodUsage `json:"pods,omitempty"`
	NumPods int        `json:"numPods"`
}

// PodUsage describes a pod and its containers' usage.
type PodUsage struct {
	Namespace  string           `json:"namespace"`
	Name       string           `json:"name"`
	UID        string           `json:"uid"`
	Containers []ContainerUsage `json:"containers"`
}

// ContainerUsage describes one container's usage.
type ContainerUsage struct {
	Name string `json:"name"`
	Usage
}

// State returns the node's state; withPods adds every pod's usage.
func (n *Node) State(withPods bool) NodeState {
	st := NodeState{Name: n.name, Address: n.Address(), Port: n.Port(), Faults: n.Faults()}
	n.mu.RLock()
	defer n.mu.RUnlock()
	st.NumPods = len(n.pods)
	if !withPods {
		return st
	}
	for _, ps := range n.sortedPodsLocked() {
		pu := PodUsage{Namespace: ps.pod.Namespace, Name: ps.pod.Name, UID: ps.pod.UID}
		for _, c := range ps.containers {
			pu.Containers = append(pu.Containers, ContainerUsage{Name: c.name, Usage: Usage{c.cpu.rate, c.memory}})
		}
		st.Pods = append(st.Pods, pu)
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
