package ukpd

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestScrapePagesTheList checks a large account on a server that answers
// at most 100 instances a request: every pod gets its metrics, from one
// read of the list in pages.
func TestScrapePagesTheList(t *testing.T) {
	const n = 2000
	RegisterMetrics()
	e := newEnv(t, func(c *fakeukpd.Config) { c.PageSize = 100 })
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		name := fmt.Sprintf("web-%04d", i)
		pods = append(pods, newPod("default", name, "kraftlet", "app"))
		e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: name, Container: "app", Node: "kraftlet", CPUCores: 0.1})
	}
	tg := oneTarget(t, SourceConfig{
		Endpoints: []EndpointConfig{{URL: e.srv.URL, Nodes: []string{"kraftlet"}}}, Pods: podLister(t, pods...), TokenFile: e.tokenFile, CAFile: e.caFile, Clock: e.clk,
	})
	e.clk.Step(10 * time.Second)
	b := scrapeOK(t, tg)
	if len(b.Pods) != n {
		t.Errorf("scrape has %d pods, want %d", len(b.Pods), n)
	}
	// from is inclusive: a page of 100 after the first adds 99. 100 + 20 ×
	// 99 covers 2,000, and one more page holds only the last instance again.
	if got := e.fake.ListRequests(); got != 22 {
		t.Errorf("%d list requests, want 22", got)
	}
}

// TestInstancesFailedPage checks that a page that fails fails the whole
// list, so the cached one is kept rather than replaced by a part.
func TestInstancesFailedPage(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: fmt.Sprintf("p-%d", i), Container: "c"})
	}
	must(t, e.fake.SetFault(fakeukpd.Fault{Kind: fakecore.FaultStatus500, Path: "/v1/instances"}))
	list, err := e.client(t, nil).Instances(t.Context())
	if list != nil || err == nil {
		t.Errorf("Instances = %v, %v; want no list and an error", list, err)
	}
}

// TestClientHostileText checks that an answer of lines with 100,000 labels
// each fails as a decode error, without a sample, and without parsing any
// line past its 64th label.
func TestClientHostileText(t *testing.T) {
	e := newEnv(t)
	e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: "p", Container: "c"})
	must(t, e.fake.SetFault(fakeukpd.Fault{Kind: fakeukpd.FaultHostileText, Bytes: 8 << 20}))
	samples, err := e.client(t, nil).Metrics(t.Context())
	checkRejected(t, samples, err, "more than 64 labels", sources.ReasonDecode)
}

// TestClientOlderForm checks a ukpd that answers the older JSON form: the
// JSON read fails with the form to use, and the Prometheus form, asked
// for with metrics-format=text, reads the same instance.
func TestClientOlderForm(t *testing.T) {
	e := newEnv(t)
	e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 0.5})
	e.clk.Step(10 * time.Second)
	must(t, e.fake.SetFault(fakeukpd.Fault{Kind: fakeukpd.FaultOlderForm}))
	samples, err := e.client(t, nil).Metrics(t.Context())
	checkRejected(t, samples, err, "metrics-format=text", sources.ReasonDecode)
	samples, err = e.client(t, func(c *ClientConfig) { c.MetricsFormat = FormatText }).Metrics(t.Context())
	if err != nil || len(samples) != 1 || samples[0].CPUCoreNanos != 5e9 {
		t.Errorf("text form = %+v, %v; want one instance with 5 core-seconds", samples, err)
	}
}
