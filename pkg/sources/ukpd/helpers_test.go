package ukpd

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

const testToken = "tok-3f9a1c-very-secret"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// env is a fake ukpd served over TLS, with a token file and a CA file.
type env struct {
	clk               *clocktesting.FakeClock
	fake              *fakeukpd.Server
	srv               *httptest.Server
	tokenFile, caFile string
}

// newEnv starts the env; mod, if not nil, adjusts the fake's config.
func newEnv(t *testing.T, mod func(*fakeukpd.Config)) *env {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	cfg := fakeukpd.Config{Clock: clk, Tokens: []string{testToken}}
	if mod != nil {
		mod(&cfg)
	}
	fake := fakeukpd.New(cfg)
	srv := httptest.NewTLSServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close) // first: it releases the handlers srv.Close waits for
	dir := t.TempDir()
	e := &env{clk: clk, fake: fake, srv: srv, tokenFile: filepath.Join(dir, "token"), caFile: filepath.Join(dir, "ca.crt")}
	writeFile(t, e.tokenFile, testToken+"\n")
	writeFile(t, e.caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	return e
}

// client returns a client of the env's server; mod adjusts its config.
func (e *env) client(t *testing.T, mod func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{URL: e.srv.URL, TokenFile: e.tokenFile, CAFile: e.caFile}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	must(t, err)
	return c
}

func (e *env) add(t *testing.T, spec fakeukpd.InstanceSpec) fakeukpd.Instance {
	t.Helper()
	in, err := e.fake.AddInstance(spec)
	must(t, err)
	return in
}

// addWeb adds default/web-0's container app on kraftlet-a.
func (e *env) addWeb(t *testing.T, cores float64, rss uint64) fakeukpd.Instance {
	t.Helper()
	return e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "web-0", Container: "app", Node: "kraftlet-a", CPUCores: cores, RSSBytes: rss})
}

func checkDiff(t *testing.T, what string, want, got any, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkErr checks that err contains want and is of wantReason, or, for an
// empty want, that there is no error.
func checkErr(t *testing.T, err error, want, wantReason string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want == "":
	case err == nil || !strings.Contains(err.Error(), want):
		t.Fatalf("error = %v, want one containing %q", err, want)
	case sources.Reason(err) != wantReason:
		t.Errorf("reason = %q, want %q", sources.Reason(err), wantReason)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(content), 0o600))
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file")
	writeFile(t, path, content)
	return path
}

func counter(t *testing.T, c metrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c)
	must(t, err)
	return v
}

var allReasons = []string{
	ignoredUnknownInstance, ignoredNotRunning, ignoredMissingTags, ignoredPodNotFound, ignoredAmbiguousPod,
	ignoredContainerNotFound, ignoredNodeNotOwned, ignoredDuplicate, ignoredMissingRequired, ignoredImplausible, ignoredOtherInstance,
}

func counts(t *testing.T, c *metrics.CounterVec, labels ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, l := range labels {
		out[l] = counter(t, c.WithLabelValues(l))
	}
	return out
}

// checkGrowth checks how much c's counter of each label of before grew
// since: by want, and not at all where want has no entry.
func checkGrowth(t *testing.T, what string, c *metrics.CounterVec, before, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	for l, v := range before {
		if d := counter(t, c.WithLabelValues(l)) - v; d != 0 {
			got[l] = d
		}
	}
	checkDiff(t, what, want, got, cmpopts.EquateEmpty())
}

func newStore(e *env, firstWindowMax, staleAfter time.Duration) *store.Store {
	return store.New(store.Config{Clock: e.clk, Sources: []string{SourceName}, FirstWindowMax: firstWindowMax, StaleAfter: staleAfter})
}

// webUsage is the usage st serves for default/web-0 on kraftlet-a; it
// fails t if there is none.
func webUsage(t *testing.T, st *store.Store, step string) store.PodUsage {
	t.Helper()
	u, _, why := st.Pod("default", "web-0", "uid-web-0", "kraftlet-a", store.PodRef{})
	if why != nil {
		t.Fatalf("%s: no usage: %v", step, why)
	}
	return u
}

func oneTarget(t *testing.T, cfg SourceConfig) sources.Target {
	t.Helper()
	src, err := NewSource(cfg)
	must(t, err)
	targets, err := src.Targets()
	if err != nil || len(targets) != 1 {
		t.Fatalf("Targets = %v, %v; want one", targets, err)
	}
	return targets[0]
}

func scrapeOK(t *testing.T, tg sources.Target) *sources.Batch {
	t.Helper()
	b, err := tg.Scrape(t.Context())
	if err != nil {
		t.Fatalf("Scrape: %v", err)
	}
	return b
}
