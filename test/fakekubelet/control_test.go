package fakekubelet

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

func TestControlAPI(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	addNode(t, f, "n1")
	addNode(t, f, "n2")
	srv := httptest.NewServer(NewControlHandler(f))
	t.Cleanup(srv.Close)

	call := func(t *testing.T, method, path, body string) (int, string) {
		code, b, err := do(t, srv.Client(), method, srv.URL+path, body, "")
		must(t, err)
		return code, string(b)
	}
	// usage and faults read what a case changed.
	usage := func(node string) func() any { return func() any { return usages(f, node) } }
	faults := func(nodes ...string) func() any {
		return func() any {
			var out [][]Fault
			for _, name := range nodes {
				n, _ := f.Node(name)
				out = append(out, n.Faults())
			}
			return out
		}
	}

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantBody                 string // substring
		got                      func() any
		want                     any
	}{
		{name: "healthz", method: "GET", path: "/healthz", wantCode: 200, wantBody: "ok"},
		{name: "ca", method: "GET", path: "/v1/ca.crt", wantCode: 200, wantBody: "BEGIN CERTIFICATE"},
		{name: "place pod", method: "PUT", path: "/v1/nodes/n1/pods/shop/web-1",
			body: `{"labels":{"app":"web"},"containers":[{"name":"a","memoryLimit":"1Gi"},{"name":"b"}]}`, wantCode: 200, wantBody: `"name": "web-1"`},
		{name: "place second pod", method: "PUT", path: "/v1/nodes/n2/pods/shop/web-2", body: `{"labels":{"app":"web"}}`, wantCode: 200},
		{name: "place pod on unknown node", method: "PUT", path: "/v1/nodes/n9/pods/shop/x", body: `{}`, wantCode: 404},
		{name: "pod usage with quantities", method: "PUT", path: "/v1/namespaces/shop/pods/web-1/usage",
			body: `{"cpu":"500m","memory":"64Mi"}`, wantCode: 200, wantBody: `"matched": 1`,
			got: usage("n1"), want: map[string]Usage{"shop/web-1/a": {250e6, 32 << 20}, "shop/web-1/b": {250e6, 32 << 20}}},
		{name: "container cpu only, as a number of cores", method: "PUT", path: "/v1/namespaces/shop/pods/web-1/usage",
			body: `{"container":"b","cpu":1.5}`, wantCode: 200,
			got: usage("n1"), want: map[string]Usage{"shop/web-1/a": {250e6, 32 << 20}, "shop/web-1/b": {1500e6, 32 << 20}}},
		{name: "selector usage", method: "PUT", path: "/v1/usage",
			body: `{"namespace":"shop","selector":"app=web","memory":"100Mi"}`, wantCode: 200, wantBody: `"matched": 2`,
			got: usage("n2"), want: map[string]Usage{"shop/web-2/main": {DefaultContainerCPU, 100 << 20}}},
		{name: "bad selector", method: "PUT", path: "/v1/usage", body: `{"selector":"a in (","cpu":"1"}`, wantCode: 400},
		{name: "usage without values", method: "PUT", path: "/v1/usage", body: `{"selector":"app=web"}`, wantCode: 400},
		{name: "negative cpu", method: "PUT", path: "/v1/usage", body: `{"cpu":"-1"}`, wantCode: 400},
		{name: "unknown field", method: "PUT", path: "/v1/usage", body: `{"cpus":"1"}`, wantCode: 400},
		{name: "forget usage", method: "DELETE", path: "/v1/usage", wantCode: 200},
		{name: "slow fault", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"Slow","delay":"2s"}`, wantCode: 200, wantBody: `"delay": "2s"`,
			got: faults("n1"), want: [][]Fault{{fakecore.Slow(2 * time.Second)}}},
		{name: "huge body fault on all nodes", method: "PUT", path: "/v1/nodes/*/fault", body: `{"kind":"HugeBody","bytes":1024}`, wantCode: 200,
			got: faults("n2"), want: [][]Fault{{fakecore.HugeBody(1024)}}},
		{name: "data faults", method: "PUT", path: "/v1/nodes/n2/fault", body: `{"kind":"ClockBackwards","offset":"20s"}`, wantCode: 200, wantBody: `"offset": "20s"`},
		{name: "duplicate one pod", method: "PUT", path: "/v1/nodes/n2/fault", body: `{"kind":"DuplicatePods","pod":"shop/web-2"}`, wantCode: 200,
			got: faults("n2"), want: [][]Fault{{fakecore.ClockBackwards(20 * time.Second), {Kind: FaultDuplicatePods, Pod: "shop/web-2"}, fakecore.HugeBody(1024)}}},
		{name: "bad offset", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"ClockBackwards","offset":"later"}`, wantCode: 400},
		{name: "bad pod", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"DuplicatePods","pod":"web-2"}`, wantCode: 400},
		{name: "bad delay", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"Slow","delay":"soon"}`, wantCode: 400},
		{name: "unknown fault", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"Melt"}`, wantCode: 400},
		{name: "clear unknown fault", method: "DELETE", path: "/v1/nodes/n1/fault?kind=Melt", wantCode: 400},
		{name: "fault on unknown node", method: "PUT", path: "/v1/nodes/n9/fault", body: `{"kind":"Status500"}`, wantCode: 404},
		{name: "clear one fault", method: "DELETE", path: "/v1/nodes/n1/fault?kind=Slow", wantCode: 200,
			got: faults("n1"), want: [][]Fault{{fakecore.HugeBody(1024)}}},
		{name: "clear all faults everywhere", method: "DELETE", path: "/v1/nodes/*/fault", wantCode: 200,
			got: faults("n1", "n2"), want: [][]Fault{nil, nil}},
		{name: "node counter reset", method: "POST", path: "/v1/nodes/n1/counter-reset", wantCode: 200},
		{name: "pod counter reset", method: "POST", path: "/v1/namespaces/shop/pods/web-2/counter-reset", wantCode: 200},
		{name: "unknown pod counter reset", method: "POST", path: "/v1/namespaces/shop/pods/nope/counter-reset", wantCode: 404},
		{name: "node state", method: "GET", path: "/v1/nodes/n1", wantCode: 200, wantBody: `"uid": "`},
		{name: "remove pod", method: "DELETE", path: "/v1/namespaces/shop/pods/web-2", wantCode: 200,
			got: usage("n2"), want: map[string]Usage{}},
		{name: "remove unknown pod", method: "DELETE", path: "/v1/namespaces/shop/pods/web-2", wantCode: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, tt.method, tt.path, tt.body)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("%s %s: got %d %s; want %d containing %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
			}
			if tt.got != nil {
				checkDiff(t, "state after the call", tt.want, tt.got())
			}
		})
	}

	t.Run("list nodes", func(t *testing.T) {
		_, body := call(t, "GET", "/v1/nodes", "")
		var got []NodeState
		must(t, json.Unmarshal([]byte(body), &got))
		var names []string
		for _, n := range got {
			names = append(names, n.Name)
			if n.Port == 0 || n.Address == "" {
				t.Errorf("node %s without an address: %+v", n.Name, n)
			}
		}
		checkDiff(t, "node names", []string{"n1", "n2"}, names)
	})
}

// observation is what one container looks like in a summary.
type observation struct {
	Time, Start                        time.Time
	Rate, Counter, PodCount, NodeCount uint64
}

// observe reads the one container of the node's one pod.
func observe(t *testing.T, n *Node) observation {
	s := n.Summary(true)
	if len(s.Pods) != 1 || s.Pods[0].PodRef.Name != "p" {
		t.Fatalf("summary lists %+v, want pod p alone", s.Pods)
	}
	p, c := s.Pods[0], s.Pods[0].Containers[0]
	return observation{Time: c.CPU.Time.UTC(), Start: c.StartTime.UTC(), Rate: *c.CPU.UsageNanoCores, Counter: *c.CPU.UsageCoreNanoSeconds,
		PodCount: *p.CPU.UsageCoreNanoSeconds, NodeCount: *s.Node.CPU.UsageCoreNanoSeconds}
}

func TestCounterIntegration(t *testing.T) {
	const base = DefaultNodeBaseCPU
	type step func(t *testing.T, f *Fleet, fc *testingclock.FakeClock)
	advance := func(d time.Duration) step {
		return func(_ *testing.T, _ *Fleet, fc *testingclock.FakeClock) { fc.Step(d) }
	}
	cores := func(nano uint64) step {
		return func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
			if f.SetUsage(UsageTarget{Namespace: "ns", Name: "p"}, Usage{CPUNanoCores: nano, MemoryBytes: 1 << 20}) != 1 {
				t.Fatal("pod not matched")
			}
		}
	}
	// obs is what the pod's one container shows at+after t0, started at
	// start+t0; the pod's counter is the container's.
	obs := func(at, start time.Duration, rate, counter, node uint64) observation {
		return observation{Time: t0.Add(at), Start: t0.Add(start), Rate: rate, Counter: counter, PodCount: counter, NodeCount: node}
	}
	const c, sec = DefaultContainerCPU, time.Second
	tests := []struct {
		name  string
		pod   Pod
		steps []step
		want  observation
	}{
		{name: "default rate integrates over elapsed time", steps: []step{advance(10 * sec)}, want: obs(10*sec, 0, c, 10*c, 10*(base+c))},
		{name: "sample time is quantised to the second", steps: []step{advance(2500 * time.Millisecond)}, want: obs(2*sec, 0, c, 2*c, 2*(base+c))},
		{name: "rate change takes effect from the current sample instant", steps: []step{advance(4 * sec), cores(2e9), advance(3 * sec)},
			want: obs(7*sec, 0, 2e9, 4*c+6e9, 7*base+4*c+6e9)},
		{name: "mid-second change counts from the second's start", steps: []step{advance(4300 * time.Millisecond), cores(1e9), advance(1700 * time.Millisecond)},
			want: obs(6*sec, 0, 1e9, 4*c+2e9, 6*base+4*c+2e9)},
		{name: "zero rate freezes the counter", steps: []step{cores(5e8), advance(2 * sec), cores(0), advance(time.Hour)},
			want: obs(time.Hour+2*sec, 0, 0, 1e9, (3600+2)*base+1e9)},
		{name: "pod that started earlier has accumulated usage", pod: Pod{StartTime: t0.Add(-100 * sec)}, want: obs(0, -100*sec, c, 100*c, 0)},
		{name: "pod counter reset restarts from zero with a new start time", steps: []step{advance(5 * sec), func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
			must(t, f.ResetPodCounters("ns", "p"))
		}, advance(2 * sec)}, want: obs(7*sec, 5*sec, c, 2*c, 7*(base+c))},
		{name: "node counter reset keeps the node counter monotonic", steps: []step{advance(5 * sec), func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
			n, _ := f.Node("n")
			must(t, n.SetFault(Fault{Kind: fakecore.FaultCounterReset}))
		}}, want: obs(5*sec, 5*sec, c, 0, 5*(base+c))},
		{name: "large rate over a long time does not overflow", steps: []step{cores(64e9), advance(30 * 24 * time.Hour)},
			want: obs(30*24*time.Hour, 0, 64e9, 64*30*24*3600*1e9, 30*24*3600*base+64*30*24*3600*1e9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fc := newTestFleet(t, Config{})
			n := addNode(t, f, "n")
			p := tt.pod
			p.Namespace, p.Name = "ns", "p"
			must(t, f.SetPod("n", p))
			for _, s := range tt.steps {
				s(t, f, fc)
			}
			checkDiff(t, "observation", tt.want, observe(t, n))
		})
	}
}

func TestUsageSpreadAndRules(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	addNode(t, f, "n1")
	addNode(t, f, "n2")
	three := []Container{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	must(t, f.SetPod("n1", Pod{Namespace: "ns", Name: "web-1", Labels: map[string]string{"app": "web"}, Containers: three}))
	must(t, f.SetPod("n2", Pod{Namespace: "ns", Name: "db-1", Labels: map[string]string{"app": "db"}}))

	sel, err := labels.Parse("app=web")
	must(t, err)
	if got := f.SetUsage(UsageTarget{Namespace: "ns", Selector: sel}, Usage{CPUNanoCores: 1e9 + 1, MemoryBytes: 100}); got != 1 {
		t.Fatalf("selector matched %d pods, want 1", got)
	}
	// A replica placed later picks the remembered usage up.
	must(t, f.SetPod("n2", Pod{Namespace: "ns", Name: "web-2", Labels: map[string]string{"app": "web"}}))
	f.SetUsage(UsageTarget{Namespace: "ns", Name: "db-1", Container: "main"}, Usage{CPUNanoCores: 7, MemoryBytes: 8})

	want := map[string]Usage{
		"ns/web-1/a":    {CPUNanoCores: 333333334, MemoryBytes: 34},
		"ns/web-1/b":    {CPUNanoCores: 333333334, MemoryBytes: 33},
		"ns/web-1/c":    {CPUNanoCores: 333333333, MemoryBytes: 33},
		"ns/web-2/main": {CPUNanoCores: 1e9 + 1, MemoryBytes: 100},
		"ns/db-1/main":  {CPUNanoCores: 7, MemoryBytes: 8},
	}
	checkDiff(t, "usages", want, usages(f))
	if got := f.SetUsage(UsageTarget{Namespace: "ns", Name: "db-1", Container: "missing"}, Usage{CPUNanoCores: 1}); got != 0 {
		t.Errorf("missing container matched %d pods", got)
	}
}
