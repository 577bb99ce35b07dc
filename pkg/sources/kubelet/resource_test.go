package kubelet

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// resourceOf is s as the kubelet's /metrics/resource writes it.
func resourceOf(t testing.TB, s *statsv1alpha1.Summary) []byte {
	t.Helper()
	var b bytes.Buffer
	must(t, fakekubelet.WriteResourceMetrics(&b, s))
	return b.Bytes()
}

// sortBatch orders pods by namespace and name and containers by name:
// the Summary lists pods as the kubelet found them, the text by label.
func sortBatch(b *sources.Batch) {
	slices.SortFunc(b.Pods, func(x, y sources.PodPoint) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	for _, p := range b.Pods {
		slices.SortFunc(p.Containers, func(x, y sources.ContainerPoint) int { return strings.Compare(x.Name, y.Name) })
	}
}

// cpuWithin compares points whose CPU counters may differ by what the
// text's float64 seconds lose: under 1 ns of rounding and 1 of truncation.
var cpuWithin = cmp.Comparer(func(x, y sources.Point) bool {
	d := int64(x.CPUCoreNanos - y.CPUCoreNanos)
	return d >= -2 && d <= 2 && x.Timestamp.Equal(y.Timestamp) && x.StartTime.Equal(y.StartTime) && x.MemoryBytes == y.MemoryBytes
})

// TestDecodeResourceMatchesSummary: a kubelet's two endpoints, written
// from one set of stats as the kubelet writes them, give one batch, but
// for the pods' UIDs and the node's start time, which the text does not
// carry.
func TestDecodeResourceMatchesSummary(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for seed := range 12 {
		s := summarytest.Summary(rand.New(rand.NewPCG(uint64(seed), 7)), summarytest.Node{Name: "n1", Pods: seed, Containers: 1 + seed%3, Time: at})
		want, err := Decode("n1", summarytest.Encode(s))
		must(t, err)
		// Every series carries its time: received is never used.
		got, err := DecodeResource(context.Background(), "n1", resourceOf(t, s), at.Add(time.Hour))
		must(t, err)
		want.Nodes[0].StartTime = time.Time{}
		for i := range want.Pods {
			want.Pods[i].UID = ""
		}
		sortBatch(want)
		sortBatch(got)
		if diff := cmp.Diff(want, got, cpuWithin); diff != "" {
			t.Errorf("seed %d: DecodeResource (-Decode +DecodeResource):\n%s", seed, diff)
		}
	}
}

// resourceText is one pod's and the node's series as the kubelet writes
// them (k8s.io/kubernetes v1.37.2
// pkg/kubelet/metrics/collectors/resource_metrics.go: the families, their
// labels, a timestamp on every series but the start time), sample times to
// the millisecond.
const resourceText = `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web-1"} 1800.000000001 1796119209123
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web-1"} 1.048576e+08 1796119209123
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web-1"} 1.7961156015e+09
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 9000 1796119210456
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1796119210456
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`

func TestDecodeResource(t *testing.T) {
	received := time.UnixMilli(1796119211000)
	node := sources.NodePoint{Name: "n1", Point: sources.Point{Timestamp: time.UnixMilli(1796119210456), CPUCoreNanos: 9000e9, MemoryBytes: 2 << 30}}
	web := sources.PodPoint{Namespace: "default", Name: "web-1", Node: "n1", Containers: []sources.ContainerPoint{{Name: "app", Point: sources.Point{
		Timestamp: time.UnixMilli(1796119209123), StartTime: time.UnixMilli(1796115601500), CPUCoreNanos: 1800000000001, MemoryBytes: 100 << 20}}}}
	// edit replaces the first line that contains old with lines; no lines
	// drops it.
	edit := func(old string, lines ...string) string {
		out := strings.Split(resourceText, "\n")
		i := slices.IndexFunc(out, func(l string) bool { return strings.Contains(l, old) })
		return strings.Join(slices.Replace(out, i, i+1, lines...), "\n")
	}
	webSeries := `{container="app",namespace="default",pod="web-1"}`
	tests := []struct {
		name    string
		body    string
		want    *sources.Batch
		wantErr string // "" for none
	}{
		{name: "as the kubelet writes it", body: resourceText, want: &sources.Batch{Nodes: []sources.NodePoint{node}, Pods: []sources.PodPoint{web}}},
		{name: "untyped, no times: sampled when received", body: "node_cpu_usage_seconds_total 9000\nnode_memory_working_set_bytes 2147483648\n",
			want: &sources.Batch{Nodes: []sources.NodePoint{{Name: "n1", Point: sources.Point{Timestamp: received, CPUCoreNanos: 9000e9, MemoryBytes: 2 << 30}}}}},
		{name: "scrape error", body: edit("resource_scrape_error 0", "resource_scrape_error 1"), wantErr: "could not read its stats"},
		// Without the node's working set the node is left out, its pods kept.
		{name: "no node working set", body: edit("node_memory_working_set_bytes 2"), want: &sources.Batch{Pods: []sources.PodPoint{web}}, wantErr: "node: no memory working set"},
		{name: "empty", body: "", wantErr: "no node series"},
		{name: "garbage", body: "node_cpu_usage_seconds_total{ 1.0.0 x\n\x00", wantErr: "decode resource metrics"},
		{name: "line over the bound", body: edit("resource_scrape_error 0", "# "+strings.Repeat("x", maxResourceLine)), wantErr: "line 13 is longer than 4096 bytes"},
		{name: "NaN working set", body: edit("container_memory_working_set_bytes{", "container_memory_working_set_bytes"+webSeries+" NaN 1796119209123"),
			want: &sources.Batch{Nodes: []sources.NodePoint{node}}, wantErr: `pod default/web-1 container "app": container_memory_working_set_bytes: value NaN is implausible`},
		{name: "negative counter", body: edit("container_cpu_usage_seconds_total{", "container_cpu_usage_seconds_total"+webSeries+" -1 1796119209123"),
			want: &sources.Batch{Nodes: []sources.NodePoint{node}}, wantErr: "value -1 is implausible"},
		{name: "no working set", body: edit("container_memory_working_set_bytes{"),
			want: &sources.Batch{Nodes: []sources.NodePoint{node}}, wantErr: `container "app": no memory working set`},
		{name: "series without a pod", body: resourceText + `container_cpu_usage_seconds_total{container="x",namespace="default"} 1 1796119209123` + "\n",
			want: &sources.Batch{Nodes: []sources.NodePoint{node}, Pods: []sources.PodPoint{web}}, wantErr: "a container_cpu_usage_seconds_total series names no pod or namespace"},
		{name: "container listed twice", body: resourceText + "container_cpu_usage_seconds_total" + webSeries + " 1 1796119209123\ncontainer_memory_working_set_bytes" + webSeries + " 1 1796119209123\n",
			want: &sources.Batch{Nodes: []sources.NodePoint{node}}, wantErr: `pod default/web-1: container "app" listed twice`},
		{name: "started after the sample", body: edit("container_start_time_seconds{", "container_start_time_seconds"+webSeries+" 1.796119210e+09"),
			want: &sources.Batch{Nodes: []sources.NodePoint{node}}, wantErr: "is after the sample time"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResource(context.Background(), "n1", []byte(tc.body), received)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || sources.Reason(err) != sources.ReasonDecode):
				t.Errorf("error %v, want a %s error saying %q", err, sources.ReasonDecode, tc.wantErr)
			}
			if tc.want != nil && got != nil {
				if tc.want.Pods == nil {
					tc.want.Pods = got.Pods[:0:0]
				}
				if got.Pods == nil {
					got.Pods = tc.want.Pods[:0:0]
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("batch (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDecodeResource: any text gives a batch, an error or both, never a
// panic, and a batch holds only points DecodeResource vouches for.
func FuzzDecodeResource(f *testing.F) {
	f.Add([]byte(resourceText))
	f.Add(resourceOf(f, summarytest.Summary(rand.New(rand.NewPCG(1, 1)), summarytest.Node{Name: "n1", Pods: 2, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)})))
	received := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := DecodeResource(context.Background(), "n1", body, received)
		if b == nil {
			if err == nil || sources.Reason(err) != sources.ReasonDecode {
				t.Fatalf("no batch and error %v, want a decode error", err)
			}
			return
		}
		check := func(what string, p sources.Point) {
			if p.Timestamp.Before(minTime) || p.MemoryBytes > maxMemoryBytes || p.StartTime.After(p.Timestamp) {
				t.Errorf("%s: implausible point %+v", what, p)
			}
		}
		for _, n := range b.Nodes {
			check("node", n.Point)
		}
		seen := map[string]bool{}
		for _, p := range b.Pods {
			key := p.Namespace + "/" + p.Name
			if p.Namespace == "" || p.Name == "" || len(p.Containers) == 0 || seen[key] {
				t.Errorf("pod %q with %d containers (seen before: %v)", key, len(p.Containers), seen[key])
			}
			seen[key] = true
			names := map[string]bool{}
			for _, c := range p.Containers {
				if c.Name == "" || names[c.Name] {
					t.Errorf("pod %s: container %q empty or repeated", key, c.Name)
				}
				names[c.Name] = true
				check(key+"/"+c.Name, c.Point)
			}
		}
	})
}

// kwokResourceText is a node as kwok v0.8.0's own Metric simulates it
// (kustomize/metrics/resource/metrics-resource.yaml): no timestamps,
// scrape_error rather than resource_scrape_error, pod series beside the
// containers', and a start time that is seconds since the pod's creation
// (pkg/utils/cel/funcs.go, sinceSecond). Each help there is a YAML block
// ending in a newline, which kwok's handler (pkg/kwok/metrics/metrics.go,
// client_golang's promhttp) writes escaped, as \n.
const kwokResourceText = `# HELP container_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the container in core-seconds\n
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="e2e-kwok",pod="simulated"} 3.75
# HELP container_memory_working_set_bytes [ALPHA] Current working set of the container in bytes\n
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="e2e-kwok",pod="simulated"} 6.7108864e+07
# HELP container_start_time_seconds [ALPHA] Start time of the container since unix epoch in seconds\n
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="e2e-kwok",pod="simulated"} 17.402
# HELP node_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the node in core-seconds\n
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 3.75
# HELP node_memory_working_set_bytes [ALPHA] Current working set of the node in bytes\n
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 6.7108864e+07
# HELP pod_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the pod in core-seconds\n
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="e2e-kwok",pod="simulated"} 3.75
# HELP scrape_error [ALPHA] 1 if there was an error while getting metrics from the node, 0 otherwise\n
# TYPE scrape_error gauge
scrape_error 0
`

var seriesEqual = cmp.Options{cmp.AllowUnexported(resSeries{}), cmpopts.EquateNaNs()}

// TestResourceReader: the kubelet's text and kwok's are read without
// expfmt, to what expfmt reads; text outside the kubelet's form is left to
// expfmt, which reads it or refuses it as before.
func TestResourceReader(t *testing.T) {
	texts := map[string]string{"the kubelet's, by hand": resourceText}
	for seed := range 6 {
		s := summarytest.Summary(rand.New(rand.NewPCG(uint64(seed), 3)), summarytest.Node{Name: "n1", Pods: 5 * seed, Containers: 1 + seed%3, Time: time.Now()})
		texts[fmt.Sprintf("the kubelet's, seed %d", seed)] = string(resourceOf(t, s))
	}
	texts["kwok's"] = kwokResourceText
	// A real kubelet's, v1.37.2 with containerd, captured from the demo's
	// real node: swap series beside the usage.
	real, err := os.ReadFile("testdata/kubelet-v1.37.2-metrics-resource.txt")
	must(t, err)
	texts["a real kubelet's"] = string(real)
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			want, err := parseResourceExpfmt([]byte(text))
			must(t, err)
			got, ok := readResourceText([]byte(text))
			if !ok {
				t.Fatal("the reader left the text to expfmt")
			}
			if diff := cmp.Diff(want, got, seriesEqual); diff != "" {
				t.Errorf("readResourceText (-expfmt +reader):\n%s", diff)
			}
			if len(got[famNodeCPU]) != 1 {
				t.Errorf("read %d node CPU series, want 1", len(got[famNodeCPU]))
			}
			if n := len(got[famContainerCPU]); name == "a real kubelet's" && n != 14 {
				t.Errorf("read %d container CPU series of the real kubelet's 14", n)
			}
		})
	}
	// Each of these is left to expfmt, which reads or refuses it.
	for _, line := range []string{
		` container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 1 2`,
		`container_cpu_usage_seconds_total {container="a",namespace="n",pod="p"} 1 2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"}  1 2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 1  2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 1 2 `,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"}1 2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p",} 1 2`,
		`container_cpu_usage_seconds_total{container="a\"b",namespace="n",pod="p"} 1 2`,
		`container_cpu_usage_seconds_total{container="a",container="b",namespace="n",pod="p"} 1 2`,
		`container_cpu_usage_seconds_total{__name__="x",namespace="n",pod="p"} 1 2`,
		`container_cpu_usage_seconds_total{} 1 2`,
		`{"container_cpu_usage_seconds_total",namespace="n",pod="p"} 1 2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 0x1p3 2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 1_0 2`,
		`container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 1 2.5`,
		"# TYPE container_cpu_usage_seconds_total summary",
		"# TYPE container_cpu_usage_seconds_total Counter",
		"#TYPE container_cpu_usage_seconds_total counter",
		"# HELP container_cpu_usage_seconds_total  two spaces",
		`# HELP container_cpu_usage_seconds_total an escape expfmt refuses: \t`,
		`# HELP container_cpu_usage_seconds_total a backslash at the end \`,
		"# TYPE node_cpu_usage_seconds_total counter", // a second TYPE line
	} {
		text := resourceText + line + "\n"
		if _, ok := readResourceText([]byte(text)); ok {
			t.Errorf("the reader read %q; it must leave it to expfmt", line)
		}
	}
	if _, ok := readResourceText([]byte(strings.TrimSuffix(resourceText, "\n"))); ok {
		t.Error("the reader read a text without its last newline; it must leave it to expfmt")
	}
}

// FuzzResourceReaderMatchesExpfmt: whatever text the reader reads, expfmt
// reads too, to the same series.
func FuzzResourceReaderMatchesExpfmt(f *testing.F) {
	f.Add([]byte(resourceText))
	f.Add([]byte(kwokResourceText))
	if real, err := os.ReadFile("testdata/kubelet-v1.37.2-metrics-resource.txt"); err == nil {
		f.Add(real)
	}
	f.Add(resourceOf(f, summarytest.Summary(rand.New(rand.NewPCG(1, 1)), summarytest.Node{Name: "n1", Pods: 2, Containers: 2, Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)})))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := readResourceText(body)
		if !ok {
			return
		}
		want, err := parseResourceExpfmt(body)
		if err != nil {
			t.Fatalf("the reader read a text expfmt refuses: %v", err)
		}
		if diff := cmp.Diff(want, got, seriesEqual); diff != "" {
			t.Errorf("readResourceText (-expfmt +reader):\n%s", diff)
		}
	})
}
