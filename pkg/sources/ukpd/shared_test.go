package ukpd

import (
	"maps"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func TestParseRequiredTag(t *testing.T) {
	tests := []struct {
		in, wantErr string
	}{
		{in: "cluster=prod-eu"},
		{in: "k8s.io:cluster=a=b"},
		{in: "cluster", wantErr: "want key=value"},
		{in: "=x", wantErr: "want key=value"},
		{in: "cluster=", wantErr: "want key=value"},
		{in: "cluster=a b", wantErr: "the platform keeps"},
		{in: "cluster=" + string(make([]byte, 300)), wantErr: "the platform keeps"},
	}
	for _, tc := range tests {
		got, err := ParseRequiredTag(tc.in)
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.in):
			t.Errorf("ParseRequiredTag(%q) = %q, %v", tc.in, got, err)
		case tc.wantErr != "":
			checkErr(t, err, tc.wantErr, sources.ReasonOther)
		}
	}
}

// kraftletTags are the tags kraftlet writes, and extra ones.
func kraftletTags(ns, pod, container, node string, extra ...string) []string {
	return append([]string{
		fakeukpd.KraftletTag(fakeukpd.TagNamespace, ns), fakeukpd.KraftletTag(fakeukpd.TagPod, pod),
		fakeukpd.KraftletTag(fakeukpd.TagContainer, container), fakeukpd.KraftletTag(fakeukpd.TagNode, node),
	}, extra...)
}

// TestScrapeSharedAccount has two clusters in one account, both with
// kraftlet's default node name and a pod of the same name: without a
// guard the pod takes the instance started last, whichever cluster it is
// of; with a required tag only this cluster's instance counts.
func TestScrapeSharedAccount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		required []string
		wantCPU  uint64 // of web-0
		ignored  map[string]float64
	}{
		{name: "no guard", wantCPU: 20e9, ignored: map[string]float64{ignoredDuplicate: 1}},
		{name: "required tag", required: []string{"cluster=a"}, wantCPU: 5.5e9, ignored: map[string]float64{ignoredMissingRequired: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			RegisterMetrics()
			e := newEnv(t)
			tg := oneTarget(t, SourceConfig{
				Endpoints: []EndpointConfig{{URL: e.srv.URL, Nodes: []string{"kraftlet"}}},
				Pods:      podLister(t, newPod("default", "web-0", "kraftlet", "app")),
				TokenFile: e.tokenFile, CAFile: e.caFile, Clock: e.clk, RequiredTags: tc.required,
			})
			e.add(t, fakeukpd.InstanceSpec{Tags: kraftletTags("default", "web-0", "app", "kraftlet", "cluster=a"), CPUCores: 0.5})
			e.clk.Step(time.Second) // the other cluster's pod started later
			e.add(t, fakeukpd.InstanceSpec{Tags: kraftletTags("default", "web-0", "app", "kraftlet", "cluster=b"), CPUCores: 2})
			e.clk.Step(10 * time.Second)
			before := counts(t, ignoredInstances, allReasons...)
			b := scrapeOK(t, tg)
			if len(b.Pods) != 1 || b.Pods[0].Containers[0].CPUCoreNanos != tc.wantCPU {
				t.Errorf("batch = %+v, want web-0 with %d core-ns", b.Pods, tc.wantCPU)
			}
			if got := growth(t, ignoredInstances, before); !maps.Equal(got, tc.ignored) {
				t.Errorf("ignored = %v, want %v", got, tc.ignored)
			}
		})
	}
}

// TestScrapeIgnoredContainer checks that a container kraftlet runs no
// instance for reads zero, so its pod is complete.
func TestScrapeIgnoredContainer(t *testing.T) {
	pod := newPod("default", "web-0", "kraftlet-a", "app", "mesh", "log")
	pod.Annotations = map[string]string{IgnoreAnnotation: "mesh, log,not-a-container"}
	e := newScrapeEnv(t, FormatJSON, pod)
	e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "web-0", Container: "app", Node: "kraftlet-a", CPUCores: 0.5, RSSBytes: 1 << 20})
	e.clk.Step(10 * time.Second)
	now := t0.Add(10 * time.Second)
	want := []sources.ContainerPoint{
		{Name: "app", Point: sources.Point{Timestamp: now, StartTime: t0, CPUCoreNanos: 5e9, MemoryBytes: 1 << 20}},
		{Name: "log", Point: sources.Point{Timestamp: now, StartTime: t0}},
		{Name: "mesh", Point: sources.Point{Timestamp: now, StartTime: t0}},
	}
	b := e.scrape(t)
	if len(b.Pods) != 1 {
		t.Fatalf("pods = %+v, want web-0", b.Pods)
	}
	if diff := gocmp.Diff(want, b.Pods[0].Containers); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
}
