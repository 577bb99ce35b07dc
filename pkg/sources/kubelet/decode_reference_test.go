package kubelet

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

// The Summary as encoding/json reads it: the oracle the reader is checked
// against. Pointers tell a missing field from a zero one.
type refSummary struct {
	Node *refStats `json:"node"`
	Pods []refPod  `json:"pods"`
}

type refPod struct {
	PodRef struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"podRef"`
	Containers []refStats `json:"containers"`
}

type refStats struct {
	Name      string     `json:"name"`
	StartTime refTime    `json:"startTime"`
	CPU       *refSample `json:"cpu"`
	Memory    *refMemory `json:"memory"`
}

type refSample struct {
	Time  refTime `json:"time"`
	Value *uint64 `json:"usageCoreNanoSeconds"`
}

type refMemory struct {
	Time  refTime `json:"time"`
	Value *uint64 `json:"workingSetBytes"`
}

// refTime is a time as the reader takes it: the JSON string it spells,
// escapes read, in RFC 3339 by time.Time's rules. It is spelled out here
// because encoding/json's own reading of a time.Time differs between Go
// releases on escaped strings (the reader must not depend on which Go
// built the tests).
type refTime struct{ time.Time }

func (t *refTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return t.Time.UnmarshalJSON([]byte(`"` + s + `"`))
}

func (s *refStats) stats() stats {
	out := stats{name: s.Name, startTime: s.StartTime.Time}
	if s.CPU != nil && s.CPU.Value != nil {
		out.cpu = sample{time: s.CPU.Time.Time, value: *s.CPU.Value, ok: true}
	}
	if s.Memory != nil && s.Memory.Value != nil {
		out.mem = sample{time: s.Memory.Time.Time, value: *s.Memory.Value, ok: true}
	}
	return out
}

// referenceDecode is Decode with encoding/json doing the reading; what it
// makes of the values is Decode's own code.
func referenceDecode(node string, body []byte) (*sources.Batch, error) {
	var s refSummary
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, err
	}
	if s.Node == nil {
		return nil, errors.New("no node stats")
	}
	d := decoder{node: node, hasNode: true, nodeStat: s.Node.stats()}
	for i := range s.Pods {
		p := &s.Pods[i]
		d.pod = podStats{namespace: p.PodRef.Namespace, name: p.PodRef.Name, uid: p.PodRef.UID}
		for j := range p.Containers {
			d.pod.containers = append(d.pod.containers, p.Containers[j].stats())
		}
		d.addPod(i)
	}
	return d.finish()
}

// sameAsReference fails t unless Decode and referenceDecode agree on body:
// both reject it, or both return the same batch and the same account of
// what was left out. Decode may reject where encoding/json would not only
// for a read field given twice or a key that differs from one in case.
func sameAsReference(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := Decode("n1", body)
	want, wantErr := referenceDecode("n1", body)
	if got == nil && errors.Is(gotErr, errStrict) {
		return
	}
	if (got == nil) != (want == nil) {
		t.Fatalf("Decode: batch %v, error %v; encoding/json: batch %v, error %v", got != nil, gotErr, want != nil, wantErr)
	}
	if got == nil {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("batch differs from encoding/json's (-want +got):\n%s", diff)
	}
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("error %v, encoding/json's %v", gotErr, wantErr)
	}
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, body := range referenceCases() {
		t.Run(body, func(t *testing.T) { sameAsReference(t, []byte(body)) })
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 20 {
		body := summarytest.Generate(rng, summarytest.Node{Name: "n1", Pods: i, Containers: 1 + i%3, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)})
		sameAsReference(t, body)
		if b, err := Decode("n1", body); err != nil || len(b.Pods) != i {
			t.Fatalf("generated summary of %d pods: %d pods, %v", i, len(b.Pods), err)
		}
	}
}

// TestDecodeStricter shows the two rejections encoding/json would not make.
func TestDecodeStricter(t *testing.T) {
	for _, body := range []string{
		`{"node": {}, "node": {}}`,
		nodeOK + `, "pods": [{"podRef": {"name": "a", "name": "b", "namespace": "ns"}}]}`,
		`{"Node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1}}}`,
		nodeOK + `, "pods": [{"podref": {"name": "p", "namespace": "ns"}}]}`,
		`{"node": {"ſtartTime": "2026-12-01T10:00:00Z"}}`,
	} {
		if b, err := Decode("n1", []byte(body)); b != nil || !errors.Is(err, errStrict) {
			t.Errorf("Decode(%s) = %v, %v; want a rejection for an ambiguous field", body, b, err)
		}
	}
}

func referenceCases() []string {
	okPod := pod("p", `"usageCoreNanoSeconds": 5`, `"workingSetBytes": 1`)
	return []string{
		validSummary,
		nodeOK + `}`,
		nodeOK + `, "pods": [` + okPod + `]}`,
		`{"node": null, "pods": null}`,
		`{}`, `null`, ` {} `, "{\"node\":{}}\x00", "null\x00", "{\"x\": \x00}", "\x00", `[]`, `""`, `5`, `{`, `{"node": {}} x`, ``,
		`{"node": {}}`,
		`{"node": []}`, `{"node": "x"}`, `{"node": {}, "pods": {}}`, `{"node": {}, "pods": [null]}`,
		nodeOK + `, "pods": [{"podRef": null, "containers": null}]}`,
		nodeOK + `, "pods": [{"podRef": {"name": "p", "namespace": "ns"}, "containers": [null]}]}`,
		nodeOK + `, "pods": [{"podRef": {"name": 5, "namespace": "ns"}}]}`,
		nodeOK + `, "pods": [{"podRef": {"name": "p\u00e9\n", "namespace": "n\u0073", "uid": "\ud800"}, "containers": []}]}`,
		nodeOK + `, "pods": [{"podRef": {"n\u0061me": "p", "namespace": "ns"}, "containers": []}]}`,
		nodeOK + ", \"pods\": [{\"podRef\": {\"name\": \"p\xff\", \"namespace\": \"ns\"}}]}",
		nodeOK + ", \"pods\": [{\"podRef\": {\"name\": \"p\x01\", \"namespace\": \"ns\"}}]}",
		nodeOK + `, "extra": {"a": [1, -2.5e+3, true, false, null, {"b": "\\\/"}], "c": []}}`,
		nodeOK + `, "extra": [01]}`, nodeOK + `, "extra": 1.}`, nodeOK + `, "extra": -}`, nodeOK + `, "extra": tru}`,
		nodeOK + `, "extra": "\x"}`, nodeOK + `, "extra": "\u12"}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1.0}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 18446744073709551615}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 18446744073709551616}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": -0}, "memory": {"workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1e3}, "memory": {"workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": 5, "usageCoreNanoSeconds": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00+01:00", "usageCoreNanoSeconds": 1}, "memory": {"time": null, "workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01 10:00:00Z", "usageCoreNanoSeconds": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00\u005a", "usageCoreNanoSeconds": 1}}}`,
		`{"node": {"startTime": null, "cpu": null, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": null}}}`,
		nodeOK + `, "pods": [` + okPod + `, ` + okPod + `]}`,
		nodeOK + `, "pods": [{"podRef": {"name": "p", "namespace": "ns"}, "containers": [` +
			`{"name": "c", "cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1}, "memory": {"workingSetBytes": 1}},` +
			`{"name": "c", "cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 2}, "memory": {"workingSetBytes": 1}}]}]}`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{"x": ` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	}
}

// FuzzDecodeMatchesEncodingJSON checks the reader against encoding/json on
// any input.
func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, body := range referenceCases() {
		if len(body) < 4096 {
			f.Add([]byte(body))
		}
	}
	f.Add(summarytest.Generate(rand.New(rand.NewPCG(1, 1)), summarytest.Node{Name: "n1", Pods: 2, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}))
	f.Fuzz(func(t *testing.T, body []byte) { sameAsReference(t, body) })
}
