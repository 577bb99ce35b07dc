package promscrape

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// TestEndpointPicker scrapes an inference gateway's endpoint picker beside a
// vLLM pod: the picker's series are credited to its InferencePool, the
// pool is spoken for while the picker has no series, the picker's token
// (re-read as it rotates) goes to the picker's pods and to no other target,
// and a pod that wears the picker's labels outside its namespaces is refused.
func TestEndpointPicker(t *testing.T) {
	var (
		mu    sync.Mutex
		auths = map[string][]string{} // by target, the Authorization headers seen
		queue atomic.Int64
	)
	recorder := func(name string, body func() string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			auths[name] = append(auths[name], r.Header.Get("Authorization"))
			mu.Unlock()
			textHandler(body)(w, r)
		}
	}
	picker := fakeEndpoint(t, recorder("picker", func() string {
		if queue.Load() == 0 {
			return "" // the gauge has no child before the first queued request
		}
		return fmt.Sprintf("# TYPE inference_extension_flow_control_queue_size gauge\n"+
			"inference_extension_flow_control_queue_size{fairness_id=\"a\",inference_pool=\"pool\",model_name=\"m\",priority=\"0\",target_model_name=\"m\"} %d\n"+
			"inference_extension_flow_control_queue_size{fairness_id=\"b\",inference_pool=\"pool\",model_name=\"m\",priority=\"0\",target_model_name=\"m\"} 1\n", queue.Load())
	}))
	engine := fakeEndpoint(t, recorder("engine", func() string { return vllmText([2]float64{2, 0}, [2]float64{1, 0}, 0.5) }))
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken := func(s string) { must(t, os.WriteFile(tokenFile, []byte(s), 0o600)) }
	writeToken("token-1\n")
	epp := map[string]string{"app": "epp"}
	pods := podList{
		{Namespace: "gateway", Name: "epp-0", UID: "uid-epp", IP: "127.0.0.1", Running: true, Labels: epp},
		{Namespace: "tenant", Name: "fake-epp", UID: "uid-fake", IP: "127.0.0.1", Running: true, Labels: epp},
		vllmPod("vllm-0", engine, nil),
	}
	cfg := mustParse(t, fmt.Sprintf(`presets: [vllm, inference-gateway]
endpointPickers:
- {name: pool, selector: app=epp, port: %d, namespaces: [gateway], inferencePool: pool, tokenFile: %q, metrics: [gateway-queue-size]}
`, picker, tokenFile))
	clk := clocktesting.NewFakeClock(now)
	src := newCollector(t, cfg, pods, Options{Clock: clk})
	key := sources.ObjectKey(sources.InferencePools, "pool")
	poolQueue := func() (float64, int) {
		series := src.store.Series("gateway", key, "", "gateway-queue-size")
		sum := 0.0
		for _, s := range series {
			sum += s.Value
		}
		return sum, len(series)
	}

	// No request queued yet: the picker is read and has no series.
	src.collectOK(t)
	if v, n := poolQueue(); n != 0 || !src.store.Credited("gateway", key) {
		t.Fatalf("before any request: %d series (sum %v), credited %v; want none, credited", n, v, src.store.Credited("gateway", key))
	}
	if src.store.Credited("tenant", key) {
		t.Error("the pool is credited in the namespace of the refused pod")
	}

	queue.Store(4)
	writeToken("token-2")
	clk.Step(15 * time.Second)
	src.collectOK(t)
	if v, n := poolQueue(); v != 5 || n != 2 {
		t.Errorf("pool queue = %v over %d series, want 5 over 2", v, n)
	}
	if got := src.store.Series("gateway", "epp-0", "uid-epp", "gateway-queue-size"); len(got) != 0 {
		t.Errorf("the picker's own pod has series %v; they are its pool's", got)
	}

	// The token file goes away: the picker fails, and sends nothing.
	must(t, os.Remove(tokenFile))
	clk.Step(15 * time.Second)
	_, errs := src.Collect(t.Context())
	if len(errs) != 1 || errs[0].ID != "picker/pool/gateway/epp-0" || errs[0].Reason != sources.ReasonOther {
		t.Errorf("without the token file: failed %+v, want the picker, reason other", errs)
	}

	mu.Lock()
	defer mu.Unlock()
	if want := []string{"Bearer token-1", "Bearer token-2"}; fmt.Sprint(auths["picker"]) != fmt.Sprint(want) {
		t.Errorf("the picker saw Authorization %q, want %q", auths["picker"], want)
	}
	for _, a := range auths["engine"] {
		if a != "" {
			t.Errorf("the engine pod was sent Authorization %q", a)
		}
	}
	if len(auths["engine"]) != 3 {
		t.Errorf("the engine was scraped %d times, want 3", len(auths["engine"]))
	}
}
