//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// TestKubectlTop checks that kubectl top and kubectl get podmetrics /
// nodemetrics, going through kube-apiserver and the aggregator, print the
// usage the fleet was told to report.
func TestKubectlTop(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	const ns = "e2e-top"
	newNamespace(ctx, t, ns)
	spec := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 3, Containers: []string{"app", "sidecar"}, CPURequest: "100m"}
	// Two containers each: 150m and 48Mi per container.
	podUsage := fakekubelet.Usage{CPUNanoCores: 300e6, MemoryBytes: 96 << 20}
	pods, _ := runDeployment(ctx, t, spec, podUsage)
	began := time.Now()

	podRow := []string{milli(podUsage.CPUNanoCores), mebi(podUsage.MemoryBytes)}
	ctrRow := []string{milli(podUsage.CPUNanoCores / 2), mebi(podUsage.MemoryBytes / 2)}
	// Rows by name, namespace/name and pod/container: cpu, memory.
	wantPods, wantAll, wantContainers := map[string][]string{}, map[string][]string{}, map[string][]string{}
	var podNames []string
	for _, p := range pods {
		podNames = append(podNames, p.Name)
		wantPods[p.Name], wantAll[ns+"/"+p.Name] = podRow, podRow
		for _, c := range spec.Containers {
			wantContainers[p.Name+"/"+c] = ctrRow
		}
	}

	for _, proto := range []string{"--use-protocol-buffers=true", "--use-protocol-buffers=false"} {
		cases := []struct {
			name  string
			args  []string
			want  map[string][]string // nil: expectedNodeRows, read on every try
			exact bool                // the listed rows are all the rows
		}{
			{name: "namespace", args: []string{"top", "pod", "-n", ns}, want: wantPods, exact: true},
			{name: "all-namespaces", args: []string{"top", "pod", "-A"}, want: wantAll},
			{name: "selector", args: []string{"top", "pod", "-n", ns, "-l", "app=web"}, want: wantPods, exact: true},
			{name: "containers", args: []string{"top", "pod", "-n", ns, "--containers"}, want: wantContainers, exact: true},
			{name: "nodes", args: []string{"top", "node"}, exact: true},
		}
		for _, tc := range cases {
			t.Run(strings.TrimPrefix(proto, "--")+"/"+tc.name, func(t *testing.T) {
				args := append(tc.args, proto)
				must(t, poll(ctx, "kubectl "+strings.Join(args, " "), func(ctx context.Context) error {
					want := tc.want
					if want == nil {
						want = expectedNodeRows()
					}
					out, _, err := suite.cluster.Kubectl(ctx, args...)
					if err == nil {
						err = compareRows(parseTable(out), want, tc.exact)
					}
					return err
				}))
			})
		}
	}
	t.Logf("kubectl top showed the fleet's values %v after the pods were Running", since(began))

	t.Run("negotiation", func(t *testing.T) { checkNegotiation(ctx, t, ns) })
	for _, tc := range []struct {
		resource, short string
		args            []string
		want            []string
	}{
		{"pods.metrics.k8s.io", "podmetrics", []string{"-n", ns}, podNames},
		{"nodes.metrics.k8s.io", "nodemetrics", nil, suite.fleet.NodeNames},
	} {
		t.Run("get-"+tc.short, func(t *testing.T) {
			// metrics-server users type the kind; that resolves only when
			// discovery leaves singularName empty, as metrics-server does.
			for _, resource := range []string{tc.resource, tc.short} {
				checkMetricsTable(ctx, t, append([]string{"get", resource}, tc.args...), tc.want)
			}
		})
	}
}

// checkNegotiation checks that kubectl top asks for metrics.k8s.io/v1
// (v1beta1 for a kubectl before v1.37, kubectlMetricsVersion) and gets
// protobuf by default. With --use-protocol-buffers=false this kubectl
// still offers protobuf (after JSON is no longer asked for alone), so there
// the answer need only be one of the types offered.
func checkNegotiation(ctx context.Context, t *testing.T, ns string) {
	path := "/apis/metrics.k8s.io/" + kubectlMetricsVersion(t) + "/namespaces/" + ns + "/pods"
	for _, flag := range []string{"--use-protocol-buffers=true", "--use-protocol-buffers=false"} {
		_, stderr, err := suite.cluster.Kubectl(ctx, "top", "pod", "-n", ns, flag, "-v=8")
		must(t, err)
		accept, contentType, ok := exchange(stderr, path)
		if !ok {
			t.Errorf("kubectl top %s did not request %s:\n%s", flag, path, stderr)
			continue
		}
		t.Logf("kubectl top %s: Accept %q, Content-Type %q", flag, accept, contentType)
		if !slices.ContainsFunc(strings.Split(accept, ","), func(a string) bool {
			a = strings.TrimSpace(a)
			return a == "*/*" || strings.HasPrefix(contentType, a)
		}) {
			t.Errorf("kubectl top %s: response Content-Type %q was not offered in Accept %q", flag, contentType, accept)
		}
		if flag == "--use-protocol-buffers=true" && !strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf") {
			t.Errorf("kubectl top %s: response Content-Type %q, want protobuf", flag, contentType)
		}
	}
}

// exchange finds, in kubectl -v=8 output, the request for path and returns
// its Accept header and the Content-Type of the response that follows.
func exchange(stderr, path string) (accept, contentType string, ok bool) {
	for _, block := range strings.Split(stderr, "round_trippers.go") {
		switch {
		case strings.Contains(block, `"Request"`) && strings.Contains(block, path+`"`):
			accept, ok = header(block, "Accept"), true
		case ok && contentType == "" && strings.Contains(block, `"Response"`):
			contentType = header(block, "Content-Type")
		}
	}
	return accept, contentType, ok
}

func header(block, name string) string {
	for _, line := range strings.Split(block, "\n") {
		if k, v, found := strings.Cut(strings.TrimSpace(line), ":"); found && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// checkMetricsTable checks the server-side table of kubectl get.
func checkMetricsTable(ctx context.Context, t *testing.T, args []string, want []string) {
	must(t, poll(ctx, "kubectl "+strings.Join(args, " "), func(ctx context.Context) error {
		out, _, err := suite.cluster.Kubectl(ctx, args...)
		if err != nil {
			return err
		}
		tb := parseTable(out)
		if !slices.Equal(tb.header, []string{"NAME", "CPU", "MEMORY", "WINDOW"}) {
			return fmt.Errorf("header %q, want NAME CPU MEMORY WINDOW", tb.header)
		}
		rows := tb.byKey(1)
		for _, name := range want {
			switch r, ok := rows[name]; {
			case !ok:
				return fmt.Errorf("no row for %s in\n%s", name, out)
			case len(r) != 4:
				return fmt.Errorf("row %q has %d columns", r, len(r))
			}
			if _, err := time.ParseDuration(rows[name][3]); err != nil {
				return fmt.Errorf("window of %s: %w", name, err)
			}
		}
		return nil
	}))
}

// expectedNodeRows returns, for every node, the CPU and memory kubectl top
// node should print: the fleet's node base usage plus its pods.
func expectedNodeRows() map[string][]string {
	want := map[string][]string{}
	for _, n := range suite.fleet.Nodes() {
		cpu, mem := nodeBase.CPUNanoCores, nodeBase.MemoryBytes
		for _, p := range n.State(true).Pods {
			for _, c := range p.Containers {
				cpu += *c.CPU.UsageNanoCores
				mem += *c.Memory.WorkingSetBytes
			}
		}
		want[n.Name()] = []string{milli(cpu), mebi(mem)}
	}
	return want
}

// compareRows checks the CPU(cores) and MEMORY(bytes) columns of the rows
// of tb, keyed by the columns before them, against want; with exact, no
// other row may exist.
func compareRows(tb table, want map[string][]string, exact bool) error {
	cpu, mem := slices.Index(tb.header, "CPU(cores)"), slices.Index(tb.header, "MEMORY(bytes)")
	if cpu < 1 || mem < 0 {
		return fmt.Errorf("unexpected header %q", tb.header)
	}
	got := map[string][]string{}
	for k, r := range tb.byKey(cpu) {
		if len(r) == len(tb.header) && (exact || want[k] != nil) {
			got[k] = []string{r[cpu], r[mem]}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		return fmt.Errorf("rows (-want +got):\n%s", diff)
	}
	return nil
}
