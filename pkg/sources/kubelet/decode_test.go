package kubelet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

const validSummary = `{
  "node": {"nodeName": "n1", "startTime": "2026-11-30T10:00:00Z",
    "cpu": {"time": "2026-12-01T10:00:10Z", "usageNanoCores": 500000000, "usageCoreNanoSeconds": 9000000000000},
    "memory": {"time": "2026-12-01T10:00:10Z", "workingSetBytes": 2147483648, "usageBytes": 3000000000}},
  "pods": [{"podRef": {"name": "web-1", "namespace": "default", "uid": "u1"}, "startTime": "2026-12-01T09:00:00Z", "containers": [
    {"name": "app", "startTime": "2026-12-01T09:00:01Z", "cpu": {"time": "2026-12-01T10:00:09Z", "usageCoreNanoSeconds": 1800000000000},
     "memory": {"time": "2026-12-01T10:00:09Z", "workingSetBytes": 104857600}},
    {"name": "sidecar", "startTime": "2026-12-01T09:00:02Z", "cpu": {"time": "2026-12-01T10:00:08Z", "usageCoreNanoSeconds": 0},
     "memory": {"time": "2026-12-01T10:00:08Z", "workingSetBytes": 0}}
  ]}]
}`

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// wantPoint is a sample at at of what started at start.
func wantPoint(at, start string, cpu, mem uint64) sources.Point {
	return sources.Point{Timestamp: ts(at), StartTime: ts(start), CPUCoreNanos: cpu, MemoryBytes: mem}
}

func TestDecode(t *testing.T) {
	want := &sources.Batch{
		Nodes: []sources.NodePoint{{Name: "n1", Point: wantPoint("2026-12-01T10:00:10Z", "2026-11-30T10:00:00Z", 9000000000000, 2147483648)}},
		Pods: []sources.PodPoint{{
			Namespace: "default", Name: "web-1", UID: "u1", Node: "n1",
			Containers: []sources.ContainerPoint{
				{Name: "app", Point: wantPoint("2026-12-01T10:00:09Z", "2026-12-01T09:00:01Z", 1800000000000, 104857600)},
				// Zero usage is a value, not a missing field.
				{Name: "sidecar", Point: wantPoint("2026-12-01T10:00:08Z", "2026-12-01T09:00:02Z", 0, 0)},
			},
		}},
	}
	got, err := Decode("n1", []byte(validSummary))
	must(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decode (-want +got):\n%s", diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	okPod := pod("p", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 1`)
	tests := []struct {
		name, body string
		// wantPods is how many pods survive in the batch returned; -1: no
		// batch may be returned.
		wantPods int
		wantErr  string
	}{
		{name: "malformed JSON", body: `{"node": {`, wantPods: -1, wantErr: `node "n1"`},
		{name: "not an object", body: `[1,2]`, wantPods: -1, wantErr: `node "n1"`},
		{name: "no node stats", body: `{"pods": []}`, wantPods: -1, wantErr: "no node stats"},
		{name: "wrong type", body: `{"node": {"cpu": {"usageCoreNanoSeconds": "lots"}}}`, wantPods: -1, wantErr: `node "n1"`},
		{name: "negative counter", body: `{"node": {"cpu": {"usageCoreNanoSeconds": -1}}}`, wantPods: -1, wantErr: `node "n1"`},
		{name: "node without CPU keeps pods", body: `{"node": {"memory": {"workingSetBytes": 1}}, "pods": [` + okPod + `]}`, wantPods: 1, wantErr: "node: no CPU usage"},
		{name: "container without CPU is left out", body: withPods(pod("p", `"x": 1`, `"workingSetBytes": 1`)), wantErr: `pod ns/p container "c": no CPU usage`},
		// Finding 4: the pod was kept with its other containers, and served
		// with their usage against the whole pod's request.
		{name: "a pod with one container left out is left out whole",
			body: withPods(`{"podRef": {"name": "p", "namespace": "ns"}, "containers": [` +
				`{"name": "ok", "startTime": "2026-12-01T09:00:00Z", "cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 5}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}},` +
				`{"name": "new", "startTime": "2026-12-01T09:00:00Z", "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}}]}`),
			wantErr: `pod ns/p container "new": no CPU usage (the pod is left out)`},
		{name: "container without memory is left out", body: withPods(pod("p", `"usageCoreNanoSeconds": 5`, `"usageBytes": 1`)), wantErr: "no memory working set"},
		{name: "absurd memory", body: withPods(pod("p", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 9000000000000000000`)), wantErr: "implausible"},
		{name: "missing sample time",
			body:    withPods(`{"podRef": {"name": "p", "namespace": "ns"}, "containers": [{"name": "c", "cpu": {"usageCoreNanoSeconds": 5}, "memory": {"workingSetBytes": 1}}]}`),
			wantErr: "missing or implausible"},
		{name: "pod without a name", body: withPods(`{"podRef": {"namespace": "ns"}, "containers": []}`), wantErr: "missing podRef"},
		{name: "start after sample", wantErr: "after the sample time",
			body: withPods(`{"podRef": {"name": "p", "namespace": "ns"}, "containers": [{"name": "c", "startTime": "2030-01-01T00:00:00Z", "cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 5}, "memory": {"workingSetBytes": 1}}]}`)},
		{name: "one bad pod costs only itself", body: withPods(pod("bad", `"x": 1`, `"workingSetBytes": 1`), pod("good", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 1`)), wantPods: 1, wantErr: "pod ns/bad"},
		{name: "a pod listed twice is left out, others kept", wantPods: 1, wantErr: "pod ns/twice: listed 2 times",
			body: withPods(pod("twice", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 1`), pod("twice", `"usageCoreNanoSeconds": 9`, `"workingSetBytes": 2`),
				pod("once", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 1`))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Decode("n1", []byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), `"n1"`) {
				t.Errorf("error %q does not name the node", err)
			}
			if (b != nil) != (tc.wantPods >= 0) {
				t.Fatalf("batch = %v, want one: %v", b, tc.wantPods >= 0)
			}
			if b != nil && (len(b.Pods) != tc.wantPods || sources.Reason(err) != sources.ReasonDecode) {
				t.Errorf("got %d pods, reason %q; want %d, %q", len(b.Pods), sources.Reason(err), tc.wantPods, sources.ReasonDecode)
			}
		})
	}
}

const nodeOK = `{"node": {"startTime": "2026-11-30T10:00:00Z", "cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}}`

// withPods is a Summary of a healthy node with pods.
func withPods(pods ...string) string { return nodeOK + `, "pods": [` + strings.Join(pods, ",") + `]}` }

func pod(name, cpu, mem string) string {
	return `{"podRef": {"name": "` + name + `", "namespace": "ns", "uid": "u"}, "containers": [{"name": "c", "startTime": "2026-12-01T09:00:00Z", "cpu": {"time": "2026-12-01T10:00:00Z", ` + cpu + `}, "memory": {"time": "2026-12-01T10:00:00Z", ` + mem + `}}]}`
}

// FuzzDecode checks that no input crashes the decoder and that whatever it
// accepts obeys the invariants the store relies on.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validSummary))
	f.Add([]byte(nodeOK + `}`))
	f.Add([]byte(withPods(pod("p", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 1`))))
	f.Add([]byte(`{"node": null, "pods": null}`))
	f.Add([]byte(`{}`))
	f.Add(summarytest.Generate(rand.New(rand.NewPCG(2, 2)), summarytest.Node{Name: "n1", Pods: 3, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := Decode("n1", body)
		if b == nil {
			if err == nil {
				t.Fatal("nil batch without an error")
			}
			return
		}
		for _, n := range b.Nodes {
			checkPoint(t, n.Point)
		}
		for _, p := range b.Pods {
			if p.Name == "" || p.Namespace == "" || p.Node != "n1" || len(p.Containers) == 0 {
				t.Fatalf("accepted pod %+v", p)
			}
			for _, c := range p.Containers {
				if c.Name == "" {
					t.Fatalf("accepted a container without a name in %s/%s", p.Namespace, p.Name)
				}
				checkPoint(t, c.Point)
			}
		}
	})
}

func checkPoint(t *testing.T, p sources.Point) {
	t.Helper()
	if p.Timestamp.Before(minTime) || p.MemoryBytes > maxMemoryBytes || (!p.StartTime.IsZero() && p.StartTime.After(p.Timestamp)) {
		t.Fatalf("accepted implausible point %+v", p)
	}
}

// TestDecodeContext: a decode whose context is done stops with a timeout
// and no batch, in a long list of pods and in one pod's long list of
// containers alike; with a live context the same bodies decode.
func TestDecodeContext(t *testing.T) {
	container := `{"name": "c%d", "startTime": "2026-12-01T09:00:01Z", "cpu": {"time": "2026-12-01T10:00:09Z", "usageCoreNanoSeconds": 1}, "memory": {"time": "2026-12-01T10:00:09Z", "workingSetBytes": 1}}`
	node := `"node": {"nodeName": "n1", "startTime": "2026-11-30T10:00:00Z", "cpu": {"time": "2026-12-01T10:00:10Z", "usageCoreNanoSeconds": 1}, "memory": {"time": "2026-12-01T10:00:10Z", "workingSetBytes": 1}}`
	var pods, containers []string
	for i := range 2 * checkEvery {
		pods = append(pods, fmt.Sprintf(`{"podRef": {"name": "p%d", "namespace": "ns", "uid": "u%d"}, "containers": [%s]}`, i, i, fmt.Sprintf(container, 0)))
		containers = append(containers, fmt.Sprintf(container, i))
	}
	bodies := map[string]string{
		"many pods":                  `{` + node + `, "pods": [` + strings.Join(pods, ",") + `]}`,
		"one pod of many containers": `{` + node + `, "pods": [{"podRef": {"name": "p", "namespace": "ns", "uid": "u"}, "containers": [` + strings.Join(containers, ",") + `]}]}`,
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			if b, err := DecodeContext(t.Context(), "n1", []byte(body)); err != nil || len(b.Pods) == 0 {
				t.Fatalf("live context: %d pods, %v; want a batch", len(b.Pods), err)
			}
			b, err := DecodeContext(done, "n1", []byte(body))
			if b != nil || sources.Reason(err) != sources.ReasonTimeout || !errors.Is(err, context.Canceled) {
				t.Fatalf("done context: batch %v, error %v (%s); want none and a timeout", b, err, sources.Reason(err))
			}
		})
	}
}
