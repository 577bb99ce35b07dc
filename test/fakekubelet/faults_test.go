package fakekubelet

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// The faults both fakes have are tested in fakecore's TestFaults.

// podView is what the pod-fault tests read of one pod in a Summary.
type podView struct {
	Pod        string
	Time       time.Time
	Counter    uint64
	WorkingSet uint64
}

func summaryView(t *testing.T, n *Node) []podView {
	var out []podView
	for _, p := range summary(t, n).Pods {
		c := p.Containers[0]
		out = append(out, podView{p.PodRef.Namespace + "/" + p.PodRef.Name, c.CPU.Time.UTC(), *c.CPU.UsageCoreNanoSeconds, *c.Memory.WorkingSetBytes})
	}
	return out
}

// TestPodFaults checks the faults that list pods a node does not have: a
// copy has twice the usage of its pod, and neither the node's own totals
// nor the other node change.
func TestPodFaults(t *testing.T) {
	f, fc := newTestFleet(t, Config{})
	a, b := addNode(t, f, "node-a"), addNode(t, f, "node-b")
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "a"})
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "b"})
	setPod(t, f, "node-b", Pod{Namespace: "ns", Name: "c"})
	fc.Step(10 * time.Second)
	pod := func(name string, scale uint64) podView {
		return podView{name, t0.Add(10 * time.Second), scale * 10 * DefaultContainerCPU, scale * DefaultContainerMemory}
	}
	tests := []struct {
		name  string
		fault Fault
		want  []podView
	}{
		{name: "one pod twice", fault: Fault{Kind: FaultDuplicatePods, Pod: "ns/b"}, want: []podView{pod("ns/a", 1), pod("ns/b", 1), pod("ns/b", 2)}},
		{name: "every pod twice", fault: Fault{Kind: FaultDuplicatePods}, want: []podView{pod("ns/a", 1), pod("ns/a", 2), pod("ns/b", 1), pod("ns/b", 2)}},
		{name: "foreign pods", fault: Fault{Kind: FaultForeignPods}, want: []podView{pod("ns/a", 1), pod("ns/b", 1), pod("ns/c", 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			must(t, a.SetFault(tt.fault))
			if diff := cmp.Diff(tt.want, summaryView(t, a)); diff != "" {
				t.Errorf("node-a (-want +got):\n%s", diff)
			}
			if got := *a.Summary(true).Node.CPU.UsageCoreNanoSeconds; got != 10*(DefaultNodeBaseCPU+2*DefaultContainerCPU) {
				t.Errorf("node-a counter %d", got)
			}
			if diff := cmp.Diff([]podView{pod("ns/c", 1)}, summaryView(t, b)); diff != "" {
				t.Errorf("node-b (-want +got):\n%s", diff)
			}
			must(t, a.ClearFault(tt.fault.Kind))
			if diff := cmp.Diff([]podView{pod("ns/a", 1), pod("ns/b", 1)}, summaryView(t, a)); diff != "" {
				t.Errorf("after clearing (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConnectionFaultWhileDead checks that a node's Dead and transport
// faults compose: it comes back with the transport fault.
func TestConnectionFaultWhileDead(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	must(t, n.SetFault(Fault{Kind: FaultDead}))
	must(t, n.SetFault(Fault{Kind: fakecore.FaultUntrustedCertificate}))
	if _, _, err := get(t, newClient(t, f), n, summaryPath, bearerAuth); err == nil {
		t.Fatal("a Dead node answered")
	}
	must(t, n.ClearFault(FaultDead))
	if code, _, err := get(t, newClient(t, f), n, summaryPath, bearerAuth); !errors.As(err, &x509.UnknownAuthorityError{}) {
		t.Errorf("got %d, %v; want an unknown authority", code, err)
	}
	must(t, n.ClearFault(""))
	mustGet(t, newClient(t, f), n, summaryPath)
}
