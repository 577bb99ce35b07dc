package kubelet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
)

// readShape is the part of a Summary that Decode reads, as nested keys;
// a nil shape keeps the value whole. Arrays take their elements' shape.
type readShape map[string]readShape

var (
	cpuShape       = readShape{"time": nil, "usageCoreNanoSeconds": nil}
	memoryShape    = readShape{"time": nil, "workingSetBytes": nil}
	containerShape = readShape{"name": nil, "startTime": nil, "cpu": cpuShape, "memory": memoryShape}
	summaryShape   = readShape{
		"node": {"startTime": nil, "cpu": cpuShape, "memory": memoryShape},
		"pods": {"podRef": {"name": nil, "namespace": nil, "uid": nil}, "containers": containerShape},
	}
)

// keepRead returns v with only the keys of shape, and an error for a time
// string that is not RFC 3339 by time.Time's rules. The kubelet's types
// decode every field, and metav1.Time parses with time.Parse, which takes
// some spellings RFC 3339 does not (go.dev/issue/54580: a one-digit hour, a
// comma before the fraction, a zone out of range); Decode reads only its
// fields and holds times to RFC 3339, so the reference does too.
func keepRead(v any, shape readShape, key string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if shape == nil {
			return x, nil
		}
		out := make(map[string]any, len(shape))
		for k, sub := range shape {
			if e, ok := x[k]; ok {
				kept, err := keepRead(e, sub, k)
				if err != nil {
					return nil, err
				}
				out[k] = kept
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			kept, err := keepRead(e, shape, key)
			if err != nil {
				return nil, err
			}
			out[i] = kept
		}
		return out, nil
	case string:
		if key == "time" || key == "startTime" {
			var t time.Time
			if err := t.UnmarshalJSON([]byte(`"` + x + `"`)); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// referenceDecode is Decode with encoding/json reading the body into the
// kubelet's own types (k8s.io/kubelet stats/v1alpha1), after keepRead took
// out what Decode does not read; what it makes of the values is Decode's
// own code. Numbers stay as written (json.Number) on the way through.
func referenceDecode(node string, body []byte) (*sources.Batch, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the document")
	}
	kept, err := keepRead(v, summaryShape, "")
	if err != nil {
		return nil, err
	}
	read, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	var s statsv1alpha1.Summary
	if err := json.Unmarshal(read, &s); err != nil {
		return nil, err
	}
	if m, _ := kept.(map[string]any); m["node"] == nil {
		return nil, errors.New("no node stats")
	}
	return fromSummary(node, &s)
}

// fromSummary makes a batch of the kubelet's own Summary type with
// Decode's code: what the server would do with encoding/json and
// k8s.io/kubelet's types in place of its reader.
func fromSummary(node string, s *statsv1alpha1.Summary) (*sources.Batch, error) {
	n := &s.Node
	d := decoder{node: node, hasNode: true, nodeStat: refStats(&statsv1alpha1.ContainerStats{StartTime: n.StartTime, CPU: n.CPU, Memory: n.Memory})}
	for i := range s.Pods {
		p := &s.Pods[i]
		d.pod = podStats{namespace: p.PodRef.Namespace, name: p.PodRef.Name, uid: p.PodRef.UID}
		for j := range p.Containers {
			d.pod.containers = append(d.pod.containers, refStats(&p.Containers[j]))
		}
		d.addPod(i)
	}
	return d.finish()
}

func refStats(c *statsv1alpha1.ContainerStats) stats {
	out := stats{name: c.Name, startTime: c.StartTime.Time}
	if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
		out.cpu = sample{time: c.CPU.Time.Time, value: *c.CPU.UsageCoreNanoSeconds, ok: true}
	}
	if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
		out.mem = sample{time: c.Memory.Time.Time, value: *c.Memory.WorkingSetBytes, ok: true}
	}
	return out
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
		withPods(`{"podRef": {"name": "a", "name": "b", "namespace": "ns"}}`),
		`{"Node": {"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1}}}`,
		withPods(`{"podref": {"name": "p", "namespace": "ns"}}`),
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
		withPods(okPod),
		`{"node": null, "pods": null}`,
		`{}`, `null`, ` {} `, "{\"node\":{}}\x00", "null\x00", "{\"x\": \x00}", "\x00", `[]`, `""`, `5`, `{`, `{"node": {}} x`, ``,
		`{"node": {}}`,
		`{"node": []}`, `{"node": "x"}`, `{"node": {}, "pods": {}}`, `{"node": {}, "pods": [null]}`,
		withPods(`{"podRef": null, "containers": null}`),
		withPods(`{"podRef": {"name": "p", "namespace": "ns"}, "containers": [null]}`),
		withPods(`{"podRef": {"name": 5, "namespace": "ns"}}`),
		withPods(`{"podRef": {"name": "p\u00e9\n", "namespace": "n\u0073", "uid": "\ud800"}, "containers": []}`),
		withPods(`{"podRef": {"n\u0061me": "p", "namespace": "ns"}, "containers": []}`),
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
		// Spellings metav1.Time takes and RFC 3339 does not.
		`{"node": {"cpu": {"time": "2026-12-01T1:00:00Z", "usageCoreNanoSeconds": 1}, "memory": {"workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00,5Z", "usageCoreNanoSeconds": 1}, "memory": {"workingSetBytes": 1}}}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00+24:00", "usageCoreNanoSeconds": 1}, "memory": {"workingSetBytes": 1}}}`,
		// Fields of the kubelet's types Decode does not read, with values
		// those types refuse: skipped, as the rest of the unread document.
		`{"node": {"nodeName": 5, "systemContainers": {}, "network": {"time": "x"}, "startTime": "2026-11-30T10:00:00Z", ` +
			`"cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1, "usageNanoCores": "x"}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1, "rssBytes": -1}}}`,
		nodeOK + `, "pods": [{"podRef": {"name": "p", "namespace": "ns", "uid": "u"}, "cpu": "x", "ephemeral-storage": 1, "containers": [` +
			`{"name": "c", "rootfs": [], "cpu": {"time": "2026-12-01T10:00:00Z", "usageCoreNanoSeconds": 1}, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": 1}}]}]}`,
		`{"node": {"cpu": {"time": "2026-12-01T10:00:00\u005a", "usageCoreNanoSeconds": 1}}}`,
		`{"node": {"startTime": null, "cpu": null, "memory": {"time": "2026-12-01T10:00:00Z", "workingSetBytes": null}}}`,
		withPods(okPod, okPod),
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

// BenchmarkDecode decodes one node's Summary of 30 pods × 2 containers:
// with the package's reader, and with what it stands in for, encoding/json
// into k8s.io/kubelet's Summary type and then the same batch; and the same
// stats as /metrics/resource writes them, with DecodeResource (expfmt).
func BenchmarkDecode(b *testing.B) {
	s := summarytest.Summary(rand.New(rand.NewPCG(1, 2)), summarytest.Node{
		Name: "node-0", Pods: 30, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	})
	body, text := summarytest.Encode(s), resourceOf(b, s)
	want, err := Decode("node-0", body)
	must(b, err)
	run := func(name string, in []byte, decode func() (*sources.Batch, error)) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				got, err := decode()
				must(b, err)
				if len(got.Pods) != len(want.Pods) {
					b.Fatalf("got %d pods, want %d", len(got.Pods), len(want.Pods))
				}
			}
		})
	}
	run("reader", body, func() (*sources.Batch, error) { return Decode("node-0", body) })
	run("stats-types", body, func() (*sources.Batch, error) {
		var s statsv1alpha1.Summary
		if err := json.Unmarshal(body, &s); err != nil {
			return nil, err
		}
		return fromSummary("node-0", &s)
	})
	run("resource-text", text, func() (*sources.Batch, error) {
		return DecodeResource(context.Background(), "node-0", text, time.Time{})
	})
	run("resource-text-expfmt", text, func() (*sources.Batch, error) {
		return decodeResource(context.Background(), "node-0", text, time.Time{}, func([]byte) (*resSeriesSet, bool) { return nil, false })
	})
}
