package ukpd

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// scripted serves fixed bodies and counts reads of the list.
type scripted struct {
	mu                    sync.Mutex
	list, metrics         string
	listStatus, listCalls atomic.Int32
}

// set replaces the bodies given, keeping those left empty.
func (s *scripted) set(list, metrics string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list, s.metrics = cmp.Or(list, s.list), cmp.Or(metrics, s.metrics)
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case instancesPath:
		// It ignores count and from: its one page is the whole list, and
		// the second page the source asks for adds nothing.
		if r.URL.Query().Get("from") == "" {
			s.listCalls.Add(1)
		}
		if status := s.listStatus.Load(); status != 0 {
			w.WriteHeader(int(status))
		}
		_, _ = io.WriteString(w, s.list)
	case metricsPath:
		_, _ = io.WriteString(w, s.metrics)
	default:
		http.NotFound(w, r)
	}
}

func listJSON(uuids ...string) string {
	var parts []string
	for _, u := range uuids {
		parts = append(parts, `{"uuid":"`+u+`","state":"running","tags":["k8s.io:namespace=ns","k8s.io:pod=p-`+u+`","k8s.io:container=c","kraftlet:node=n1"]}`)
	}
	return `{"status":"success","data":{"instances":[` + strings.Join(parts, ",") + `]}}`
}

func metricsJSON(entries ...string) string {
	return `{"status":"success","data":{"instances":[` + strings.Join(entries, ",") + `]}}`
}

// entry is an instance's metrics, started at 09:00.
func entry(uuid string, startCount int, cpuMS int) string {
	return `{"uuid":"` + uuid + `","state":"running","start_count":` + strconv.Itoa(startCount) +
		`,"started_at":"2026-12-01T09:00:00Z","cpu_time_ms":` + strconv.Itoa(cpuMS) + `,"rss_bytes":1}`
}

// newScriptedTarget is a target of s, which first answers list and
// metrics, for pods p-u1 to p-u3.
func newScriptedTarget(t *testing.T, s *scripted, list, metrics string, refresh time.Duration) (sources.Target, *clocktesting.FakeClock) {
	t.Helper()
	RegisterMetrics()
	s.set(list, metrics)
	clk := clocktesting.NewFakeClock(t0)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	pods := []*corev1.Pod{newPod("ns", "p-u1", "n1", "c"), newPod("ns", "p-u2", "n1", "c"), newPod("ns", "p-u3", "n1", "c")}
	return oneTarget(t, SourceConfig{
		Endpoints: []EndpointConfig{{URL: srv.URL, Nodes: []string{"n1"}}}, Pods: podLister(t, pods...), Clock: clk, ListRefresh: refresh,
	}), clk
}

func TestScrapeCachesTheList(t *testing.T) {
	s := &scripted{}
	tg, clk := newScriptedTarget(t, s, listJSON("u1"), metricsJSON(entry("u1", 1, 10)), time.Minute)
	before := counts(t, listFetches, triggerInitial, triggerRefresh, triggerUnknownInstance)
	for _, st := range []struct {
		name, list, metrics string
		step                time.Duration
		wantCalls, wantPods int
	}{
		{name: "first scrape fetches", wantCalls: 1, wantPods: 1},
		{name: "within the refresh interval", step: 20 * time.Second, wantCalls: 1, wantPods: 1},
		{name: "a new instance forces a fetch", step: 10 * time.Second, wantCalls: 2, wantPods: 2,
			list: listJSON("u1", "u2"), metrics: metricsJSON(entry("u1", 1, 20), entry("u2", 1, 1))},
		{name: "an instance the list does not hold forces one fetch", step: 10 * time.Second, wantCalls: 3, wantPods: 2,
			metrics: metricsJSON(entry("u1", 1, 30), entry("u2", 1, 2), entry("u9", 1, 1))},
		{name: "and not another", step: 10 * time.Second, wantCalls: 3, wantPods: 2},
		{name: "until the refresh is due", step: time.Minute, wantCalls: 4, wantPods: 2},
	} {
		clk.Step(st.step)
		s.set(st.list, st.metrics)
		if b, calls := scrapeOK(t, tg), int(s.listCalls.Load()); calls != st.wantCalls || len(b.Pods) != st.wantPods {
			t.Errorf("%s: %d list fetches and %d pods, want %d and %d", st.name, calls, len(b.Pods), st.wantCalls, st.wantPods)
		}
	}
	checkGrowth(t, "list fetches by trigger", listFetches, before, map[string]float64{triggerInitial: 1, triggerRefresh: 1, triggerUnknownInstance: 2})
}

func TestScrapeKeepsTheCachedList(t *testing.T) {
	s := &scripted{}
	tg, clk := newScriptedTarget(t, s, listJSON("u1"), metricsJSON(entry("u1", 1, 10)), time.Minute)
	scrapeOK(t, tg)
	s.listStatus.Store(http.StatusInternalServerError)
	clk.Step(2 * time.Minute)
	b, err := tg.Scrape(t.Context())
	if b == nil || len(b.Pods) != 1 {
		t.Fatalf("scrape with a failing list = %+v, want the pod from the cached list", b)
	}
	checkErr(t, err, "GET /v1/instances returned 500", sources.ReasonHTTPStatus)
}

func TestScrapeFailures(t *testing.T) {
	tests := []struct {
		name                string
		listStatus          int32
		metrics, wantReason string
	}{
		{name: "no list yet", listStatus: http.StatusUnauthorized, metrics: metricsJSON(), wantReason: sources.ReasonHTTPStatus},
		{name: "metrics garbage", metrics: "{{{", wantReason: sources.ReasonDecode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &scripted{}
			s.listStatus.Store(tc.listStatus)
			tg, _ := newScriptedTarget(t, s, listJSON("u1"), tc.metrics, time.Minute)
			b, err := tg.Scrape(t.Context())
			if b != nil || err == nil {
				t.Fatalf("Scrape = %v, %v; want no batch and an error", b, err)
			}
			if got := sources.Reason(err); got != tc.wantReason {
				t.Errorf("reason = %q, want %q (%v)", got, tc.wantReason, err)
			}
		})
	}
}

// TestScrapeStartCountWithoutNewStart checks the stand-in start time: the
// store sees a reset and the first rate after it stays plausible.
func TestScrapeStartCountWithoutNewStart(t *testing.T) {
	s := &scripted{}
	tg, clk := newScriptedTarget(t, s, listJSON("u1"), metricsJSON(entry("u1", 1, 900_000)), time.Hour)
	st := store.New(store.Config{Clock: clk, Sources: []string{SourceName}, FirstWindowMax: time.Minute, StaleAfter: time.Minute})
	// scrape steps the clock, scrapes u1 of cpuMS at startCount, stores
	// the batch and returns its start time.
	scrape := func(step time.Duration, startCount, cpuMS int) time.Time {
		t.Helper()
		clk.Step(step)
		s.set("", metricsJSON(entry("u1", startCount, cpuMS)))
		b := scrapeOK(t, tg)
		st.Store(SourceName, tg.Nodes(), b, clk.Now())
		return b.Pods[0].Containers[0].StartTime
	}
	usage := func(when string) store.ContainerUsage {
		t.Helper()
		u, _, why := st.Pod("ns", "p-u1", "", "n1", store.PodRef{})
		if why != nil {
			t.Fatalf("no usage %s: %v", when, why)
		}
		return u.Containers[0]
	}
	scrape(0, 1, 900_000)
	scrape(15*time.Second, 1, 907_500) // 0.5 cores
	prevScrape := clk.Now()
	// Woken 5 s before the next scrape, started_at not updated.
	if start := scrape(15*time.Second, 2, 2_500); !start.Equal(prevScrape) {
		t.Errorf("StartTime = %s, want the previous scrape %s", start, prevScrape)
	}
	// 2.5 core-s over the 15 s since the previous scrape.
	if c := usage("after the reset"); c.CPUNanoCores != 166_666_666 || c.Window != 15*time.Second {
		t.Errorf("usage after the reset = %+v, want 2.5 core-seconds over 15s", c.Usage)
	}
	// The stand-in start holds while nothing moves.
	if start := scrape(15*time.Second, 2, 10_000); !start.Equal(prevScrape) {
		t.Errorf("StartTime = %s, want it kept at %s", start, prevScrape)
	}
	if c := usage("once the start held"); c.CPUNanoCores != 500_000_000 {
		t.Errorf("usage = %+v, want 0.5 cores", c.Usage)
	}
}
