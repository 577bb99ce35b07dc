//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// TestNodeFaults breaks the kubelets of two nodes at a time, each in its own
// way, while the third node stays healthy, and checks for every fault: the
// healthy node's pods keep samples newer than the fault, the server keeps
// running (same PID) and ready, the failure is counted by reason in
// /metrics and logged once, not once per scrape, and the broken node's pods
// keep right values and then disappear within the staleness bound, or keep
// right values throughout when the scrape itself succeeds. It runs in
// parallel with TestUkpdFaults only: it breaks fleet nodes 0 and 1, which
// that test does not use.
func TestNodeFaults(t *testing.T) {
	t.Parallel()
	ctx := begin(t, 12*time.Minute)
	const ns = "e2e-faults"
	newNamespace(ctx, t, ns)
	usage := fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 40 << 20}
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns}, usage)
	nodes := suite.fleet.NodeNames
	pods := map[string][]string{}
	told := map[string]faultUsage{}
	for i, node := range nodes {
		for _, suffix := range []string{"a", "b"} {
			name := "n" + strconv.Itoa(i) + "-" + suffix
			pods[node] = append(pods[node], name)
			told[name] = faultUsage{milliCPU: 50, memory: 40 << 20}
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
	if err := poll(ctx, "metrics of every pod", func(ctx context.Context) error {
		return faultAllRight(ctx, all, time.Now().Add(-time.Hour))
	}); err != nil {
		t.Fatal(err)
	}

	maxBytes := int64(10 << 20)
	for _, a := range suite.server.Args {
		if v, ok := strings.CutPrefix(a, "--kubelet-max-response-bytes="); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				maxBytes = n
			}
		}
	}
	fault := func(f fakekubelet.Fault) func(node string) faultCase {
		return func(node string) faultCase {
			n, _ := suite.fleet.Node(node)
			return faultCase{
				name:  string(f.Kind),
				set:   func() error { return n.SetFault(f) },
				clear: func() error { return n.ClearFault("") },
			}
		}
	}
	with := func(mk func(string) faultCase, edit func(*faultCase)) func(string) faultCase {
		return func(node string) faultCase {
			tc := mk(node)
			edit(&tc)
			return tc
		}
	}
	gone := func(reason string) func(*faultCase) {
		return func(tc *faultCase) { tc.reason, tc.outcome = reason, faultGone }
	}
	right := func(tc *faultCase) { tc.outcome = faultRight }
	kind := func(k fakekubelet.FaultKind) fakekubelet.Fault { return fakekubelet.Fault{Kind: k} }

	// Two faults at a time, on nodes 0 and 1, never two of the same reason
	// together: the failure counter has no per-node label.
	rounds := [][2]func(string) faultCase{
		{with(fault(kind(fakekubelet.FaultDead)), gone("connection")), with(fault(kind(fakecore.FaultStatus500)), gone("http_status"))},
		{with(fault(kind(fakecore.FaultUntrustedCertificate)), gone("tls")), with(fault(fakecore.Slow(suite.timeout+5*time.Second)), gone("timeout"))},
		{with(fault(kind(fakecore.FaultWrongNameCertificate)), gone("tls")), with(fault(kind(fakecore.FaultGarbage)), gone("decode"))},
		{with(fault(kind(fakecore.FaultHandshakeStall)), gone("timeout")), with(fault(fakecore.HugeBody(maxBytes+1<<20)), gone("too_large"))},
		{with(fault(kind(fakecore.FaultStall)), gone("timeout")), with(fault(kind(fakecore.FaultResetConnection)), gone("connection"))},
		{with(fault(kind(fakecore.FaultTruncated)), gone("decode")), with(fault(kind(fakecore.FaultCounterReset)), right)},
		{with(fault(fakecore.ClockBackwards(3*suite.resolution)), right), func(node string) faultCase {
			dup := pods[node][1]
			tc := fault(fakekubelet.Fault{Kind: fakekubelet.FaultDuplicatePods, Pod: ns + "/" + dup})(node)
			tc.partial, tc.outcome, tc.dropped = true, faultDropped, map[string]bool{dup: true}
			return tc
		}},
		{func(node string) faultCase {
			// Node 0 lists every other node's pods too, with twice their
			// values: those pods must keep their own node's values.
			tc := fault(kind(fakekubelet.FaultForeignPods))(node)
			tc.outcome = faultRight
			return tc
		}, nil},
	}
	began := time.Now()
	for _, round := range rounds {
		var names []string
		for _, mk := range round {
			if mk != nil {
				names = append(names, mk(nodes[0]).name)
			}
		}
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			for i, mk := range round {
				if mk == nil {
					continue
				}
				node := nodes[i]
				tc := mk(node)
				sc := scope(node)
				if tc.name == string(fakekubelet.FaultForeignPods) {
					sc.affected = append(append(append([]string{}, pods[nodes[0]]...), pods[nodes[1]]...), healthy...)
				}
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					runFault(ctx, t, sc, tc)
				})
			}
		})
	}
	t.Logf("every kubelet fault in %v", time.Since(began).Round(time.Second))
}
