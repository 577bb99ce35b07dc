//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestNodeFaults breaks the kubelets of nodes 0 and 1, one fault of each kind only a control plane shows
// whole, while node 2 stays healthy. The in-process tables (pkg/sources/kubelet) cover every other fault. It
// runs in parallel with TestUkpdFaults only, which does not use nodes 0 and 1.
func TestNodeFaults(t *testing.T) {
	t.Parallel()
	ctx := begin(t, 12*time.Minute)
	const ns = "e2e-faults"
	newNamespace(ctx, t, ns)
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns}, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 40 << 20})
	nodes := suite.fleet.NodeNames
	pods := map[string][]string{}
	told := map[string]faultSample{}
	for i, node := range nodes {
		pods[node] = []string{fmt.Sprintf("n%d-a", i), fmt.Sprintf("n%d-b", i)}
		for _, p := range pods[node] {
			told[p] = faultSample{milliCPU: 50, memory: 40 << 20}
		}
		createPinnedPods(ctx, t, ns, node, pods[node]...)
	}
	scope := func(node string, affected ...string) faultScope {
		return faultScope{source: "kubelet", target: "node/" + node, ns: ns, affected: affected, healthy: pods[nodes[2]],
			told: told, tolerance: 0.02}
	}
	all := scope(nodes[0], slices.Concat(pods[nodes[0]], pods[nodes[1]])...)
	must(t, poll(ctx, "metrics of every pod", func(ctx context.Context) error {
		return faultAllRight(ctx, all, time.Now().Add(-time.Hour))
	}))

	fault := func(node string, f fakekubelet.Fault, tc faultCase) faultCase {
		n, _ := suite.fleet.Node(node)
		tc.name, tc.set = string(f.Kind), func() error { return n.SetFault(f) }
		tc.clear = func() error { return n.ClearFault("") }
		return tc
	}
	dup := pods[nodes[0]][1]
	// Two faults at a time, the i-th on node i, never two of the same reason together: the failure counter
	// has no per-node label. The zero outcome is faultGone.
	rounds := [][]faultCase{
		{
			fault(nodes[0], fakekubelet.Fault{Kind: fakekubelet.FaultDead}, faultCase{reason: "connection"}),
			fault(nodes[1], fakekubelet.Fault{Kind: fakecore.FaultGarbage}, faultCase{reason: "decode"}),
		},
		{fault(nodes[0], fakekubelet.Fault{Kind: fakekubelet.FaultDuplicatePods, Pod: ns + "/" + dup},
			faultCase{partial: true, outcome: faultDropped, dropped: map[string]bool{dup: true}})},
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
					runFault(ctx, t, scope(nodes[i], pods[nodes[i]]...), tc)
				})
			}
		})
	}
	t.Logf("every kubelet fault in %v", time.Since(began).Round(time.Second))
}

// TestUkpdFaults breaks the suite's ukpd endpoint, one fault of each kind only a control plane shows whole,
// while kubelet-backed pods on fleet node 2 stay healthy. The in-process tests (pkg/sources/ukpd) cover every
// other fault. It runs in parallel with TestNodeFaults only.
func TestUkpdFaults(t *testing.T) {
	t.Parallel()
	ctx := begin(t, 12*time.Minute)
	const (
		ns   = "e2e-ukpd-faults"
		node = "kraftlet-faults"
	)
	newNamespace(ctx, t, ns)
	kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns}, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 40 << 20})
	healthy := []string{"web-a", "web-b"}
	createPinnedPods(ctx, t, ns, suite.fleet.NodeNames[2], healthy...)
	uk := env.DeploymentSpec{Namespace: ns, Name: "uk", Replicas: 2, CPURequest: "100m"}
	ukPods := runKraftletDeployment(ctx, t, uk)
	sc := faultScope{source: "ukpd", target: "ukpd/" + suite.ukpd.URL, ns: ns, healthy: healthy,
		told: map[string]faultSample{}, tolerance: 0.05}
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
	handler := func(f fakeukpd.Fault, tc faultCase) faultCase {
		tc.name, tc.set = string(f.Kind), func() error { return u.SetFault(f) }
		tc.clear = func() error { u.ClearFault(""); return nil }
		return tc
	}
	cases := []faultCase{
		transport(fakecore.FaultRefused, "connection"),
		handler(fakeukpd.Fault{Kind: fakecore.FaultGarbage}, faultCase{reason: "decode", outcome: faultGone}),
		// A second instance for every container, with twice the values: the pod is served with its right
		// values or not at all.
		handler(fakeukpd.Fault{Kind: fakeukpd.FaultDuplicateInstances}, faultCase{outcome: faultRightOrGone,
			counter: []string{"group_metrics_server_ukpd_ignored_instances_total", `reason="duplicate_container"`}}),
	}

	began := time.Now()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runFault(ctx, t, sc, tc)
		})
	}
	t.Logf("every ukpd fault in %v", time.Since(began).Round(time.Second))
}
