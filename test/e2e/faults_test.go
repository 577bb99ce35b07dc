//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestNodeFaults breaks the kubelets of nodes 0 and 1, one fault of each kind
// only a control plane shows whole, while node 2 stays healthy. The in-process
// tables (pkg/sources/kubelet) cover every other fault. It runs in parallel
// with TestUkpdFaults only, which does not use nodes 0 and 1.
func TestNodeFaults(t *testing.T) {
	t.Parallel()
	ctx := begin(t, 12*time.Minute)
	const ns = "e2e-faults"
	newNamespace(ctx, t, ns)
	usage := fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 40 << 20}
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns}, usage)
	nodes := suite.fleet.NodeNames
	pods := map[string][]string{}
	told := map[string]faultSample{}
	for i, node := range nodes {
		for _, suffix := range []string{"a", "b"} {
			name := "n" + strconv.Itoa(i) + "-" + suffix
			pods[node] = append(pods[node], name)
			told[name] = faultSample{milliCPU: 50, memory: 40 << 20}
		}
		createPinnedPods(ctx, t, ns, node, pods[node]...)
	}
	healthy := pods[nodes[2]]
	scope := func(node string) faultScope {
		return faultScope{
			source: "kubelet", target: "node/" + node, ns: ns,
			affected: pods[node], healthy: healthy, told: told, tolerance: 0.02,
		}
	}
	all := scope(nodes[0])
	all.affected = append(append([]string{}, pods[nodes[0]]...), pods[nodes[1]]...)
	must(t, poll(ctx, "metrics of every pod", func(ctx context.Context) error {
		return faultAllRight(ctx, all, time.Now().Add(-time.Hour))
	}))

	fault := func(node string, f fakekubelet.Fault) faultCase {
		n, _ := suite.fleet.Node(node)
		return faultCase{
			name:  string(f.Kind),
			set:   func() error { return n.SetFault(f) },
			clear: func() error { return n.ClearFault("") },
		}
	}
	gone := func(node string, k fakekubelet.FaultKind, reason string) faultCase {
		tc := fault(node, fakekubelet.Fault{Kind: k})
		tc.reason, tc.outcome = reason, faultGone
		return tc
	}
	dup := pods[nodes[0]][1]
	duplicate := fault(nodes[0], fakekubelet.Fault{Kind: fakekubelet.FaultDuplicatePods, Pod: ns + "/" + dup})
	duplicate.partial, duplicate.outcome, duplicate.dropped = true, faultDropped, map[string]bool{dup: true}

	// Two faults at a time, the i-th on node i, never two of the same
	// reason together: the failure counter has no per-node label.
	rounds := [][]faultCase{
		{gone(nodes[0], fakekubelet.FaultDead, "connection"), gone(nodes[1], fakecore.FaultGarbage, "decode")},
		{duplicate},
	}
	began := time.Now()
	for _, round := range rounds {
		var names []string
		for _, tc := range round {
			names = append(names, tc.name)
		}
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			for i, tc := range round {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					runFault(ctx, t, scope(nodes[i]), tc)
				})
			}
		})
	}
	t.Logf("every kubelet fault in %v", time.Since(began).Round(time.Second))
}

// TestUkpdFaults breaks the suite's ukpd endpoint, one fault of each kind only a
// control plane shows whole, while kubelet-backed pods on fleet node 2 stay
// healthy. The in-process tests (pkg/sources/ukpd) cover every other fault.
// It runs in parallel with TestNodeFaults only.
func TestUkpdFaults(t *testing.T) {
	t.Parallel()
	ctx := begin(t, 12*time.Minute)
	const (
		ns   = "e2e-ukpd-faults"
		node = "kraftlet-faults"
	)
	newNamespace(ctx, t, ns)
	kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	uk := env.DeploymentSpec{Namespace: ns, Name: "uk", Replicas: 2, CPURequest: "100m"}
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns}, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 40 << 20})
	healthy := []string{"web-a", "web-b"}
	createPinnedPods(ctx, t, ns, suite.fleet.NodeNames[2], healthy...)
	ukPods := runKraftletDeployment(ctx, t, uk)
	sc := faultScope{
		source: "ukpd", target: "ukpd/" + suite.ukpd.URL, ns: ns,
		healthy: healthy, told: map[string]faultSample{}, tolerance: 0.05,
	}
	for _, p := range healthy {
		sc.told[p] = faultSample{milliCPU: 50, memory: 40 << 20}
	}
	for _, p := range ukPods {
		sc.affected = append(sc.affected, p.Name)
		sc.told[p.Name] = faultSample{milliCPU: 40, memory: 64 << 20}
	}
	must(t, poll(ctx, "metrics of every pod", func(ctx context.Context) error {
		return faultAllRight(ctx, sc, time.Now().Add(-time.Hour))
	}))

	u := suite.ukpd
	transport := func(kind fakeukpd.FaultKind, reason string) faultCase {
		return faultCase{
			name: string(kind), reason: reason, outcome: faultGone,
			set:   func() error { return u.SetTransportFault(kind) },
			clear: func() error { return u.SetTransportFault("") },
		}
	}
	handler := func(f fakeukpd.Fault) faultCase {
		return faultCase{
			name:  string(f.Kind),
			set:   func() error { return u.SetFault(f) },
			clear: func() error { u.ClearFault(""); return nil },
		}
	}
	gone := func(tc faultCase, reason string) faultCase {
		tc.reason, tc.outcome = reason, faultGone
		return tc
	}
	// A second instance for every container, with twice the values: the
	// pod is served with its right values or not at all.
	dup := handler(fakeukpd.Fault{Kind: fakeukpd.FaultDuplicateInstances})
	dup.outcome = faultRightOrGone
	dup.counter = []string{"group_metrics_server_ukpd_ignored_instances_total", `reason="duplicate_container"`}
	cases := []faultCase{
		transport(fakecore.FaultRefused, "connection"),
		gone(handler(fakeukpd.Fault{Kind: fakecore.FaultGarbage}), "decode"),
		dup,
	}

	began := time.Now()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runFault(ctx, t, sc, tc)
		})
	}
	t.Logf("every ukpd fault in %v", time.Since(began).Round(time.Second))
}
