//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

const (
	// inferencePoolModule holds the InferencePool API and its CRD (the
	// endpoint picker itself moved to llm-d/llm-d-inference-scheduler,
	// which keeps its metric names).
	inferencePoolModule = "sigs.k8s.io/gateway-api-inference-extension@v1.6.2"
	// apiAudience is the suite's API server audience (its
	// --service-account-issuer; no --api-audiences is given). The picker's
	// TokenReview names no audience (controller-runtime
	// pkg/metrics/filters/filters.go), so the API server checks the
	// token against this one: the token's stated audience.
	apiAudience = "https://kubernetes.default.svc.cluster.local"
)

// TestScaleToZero: a vLLM LeaderWorkerSet behind an inference gateway,
// scaled by one HPA with minReplicas 0 (HPAScaleToZero, on by default in
// v1.37) on two Object metrics: the endpoint picker's flow-control queue on
// the InferencePool (Value 10) and the groups' vLLM queue on the
// LeaderWorkerSet (AverageValue 5). Idle, it goes to zero; a queue at the
// picker brings one group back; the group's queue takes it to its maximum;
// drained, back to zero, but not while the picker cannot be read. The
// picker checks the server's token as the real one does (TokenReview, then a
// SubjectAccessReview for get /metrics); the token is the one written to
// the file the configuration names, and no pod endpoint receives it.
func TestScaleToZero(t *testing.T) {
	ctx := begin(t, 12*time.Minute)
	const ns = "e2e-scale-to-zero"
	// The HPA of docs/inference-autoscaling.md, applied as written but for
	// a 5 s scale-down window and policy (applyHPA's); the LeaderWorkerSet
	// and the pool take the names it gives them.
	hpa := docHPAs(t, repoPath(t, "docs", "inference-autoscaling.md"))["vllm-zero"]
	name, maxGroups := hpa.Spec.ScaleTargetRef.Name, hpa.Spec.MaxReplicas
	poolMetric, lwsMetric := hpa.Spec.Metrics[0].Object, hpa.Spec.Metrics[1].Object
	if poolMetric == nil || poolMetric.DescribedObject.Kind != "InferencePool" || poolMetric.Target.Value == nil ||
		lwsMetric == nil || lwsMetric.DescribedObject.Name != name || lwsMetric.Target.AverageValue == nil || *hpa.Spec.MinReplicas != 0 {
		t.Fatalf("HPA vllm-zero: want minReplicas 0, a Value on an InferencePool, then an AverageValue on its LeaderWorkerSet")
	}
	pool := poolMetric.DescribedObject.Name
	// 4 requests at the picker want ceil(4 / value) = 1 group; 12 waiting
	// in each group's engine want more groups than run, up to maxGroups.
	if v := poolMetric.Target.Value.Value(); v < 4 || lwsMetric.Target.AverageValue.Value() >= 12 {
		t.Fatalf("HPA vllm-zero's targets (%d on the pool, %s per group) do not give the steps this test takes", v, lwsMetric.Target.AverageValue)
	}
	e := newLWSEnv(ctx, t)
	newNamespace(ctx, t, ns)
	installInferencePools(ctx, t, e)
	must(t, createInferencePool(ctx, e, ns, pool, name))

	picker := startPicker(ctx, t, e, ns, pool)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	tokenFile, configFile := filepath.Join(t.TempDir(), "token"), filepath.Join(t.TempDir(), "pod-metrics.yaml")
	must(t, os.WriteFile(configFile, fmt.Appendf(nil, `presets: [vllm, inference-gateway]
timeout: 2s
endpointPickers:
- name: %s
  selector: app=%s-epp
  port: %d
  namespaces: [%s]
  inferencePool: %s
  tokenFile: %s
  metrics: [gateway-queue-size]
`, pool, pool, picker.port, ns, pool, tokenFile), 0o600))
	// The shipped example, with its grants (the pools and LeaderWorkerSets
	// to map, get /metrics for the picker); its file is replaced by one
	// naming this test's picker, port and token.
	s := deployOwnServer(ctx, t, "group-metrics-server-zero", []string{"--pod-metrics-config=" + configFile, "--group-metrics-series"},
		repoPath(t, "manifests", "examples", "scale-to-zero"))
	e.watch = append(e.watch, s.Process)
	// The kubelet's projected token volume, for a server that runs as a
	// process here: a token of the server's ServiceAccount with the stated
	// audience, written where the configuration points.
	token, err := saToken(ctx, s.Namespace, s.ServiceAccount, apiAudience)
	must(t, err)
	picker.mu.Lock()
	picker.user, picker.token = "system:serviceaccount:"+s.Namespace+":"+s.ServiceAccount, token
	picker.mu.Unlock()
	suiteSecrets.add("the endpoint picker's token", token) // looked for in every log when the suite ends
	must(t, os.WriteFile(tokenFile, []byte(token), 0o600))

	var waiting atomic.Int64
	engines := startPodEndpoints(t, ports[0], func(p *corev1.Pod) (string, bool) {
		return vllmText(inferenceModel, float64(waiting.Load()), 0, 0.1), true
	}, []string{ns})
	ie := &inferenceEnv{lwsEnv: e, port: ports[0]}
	obj := lws.NewLeaderWorkerSet(ns, name, 1, inferenceGroupSize, lwsCPURequest, ie.scrapeAnnotations())
	must(t, unstructured.SetNestedStringMap(obj.Object, map[string]string{"app": name}, "spec", "leaderWorkerTemplate", "leaderTemplate", "metadata", "labels"))
	e.createGroup(ctx, t, obj, inferenceGroupSize)

	// The picker's queue on its pool, and on the LeaderWorkerSet the pool
	// fronts (its selector, app=vllm, matches the leader template's labels).
	poolPath := customPath(fmt.Sprintf("namespaces/%s/inferencepools.inference.networking.k8s.io/%s/gateway-queue-size", ns, pool), "")
	frontedPath, waitingPath := lwsPath(ns, name, "gateway-queue-size", ""), lwsPath(ns, name, "vllm-num-requests-waiting", "")
	for _, p := range []string{poolPath, frontedPath, waitingPath} {
		e.waitRaw(ctx, t, p, 0)
	}

	ie.applyHPA(ctx, t, ns, hpa)
	b := e.bounds
	t.Logf("HPA sync period %v, scale-down window %v, collection interval %v", suite.opts.HPASyncPeriod, testScaleDownWindow, suite.resolution)
	groups := func(n int32, bound time.Duration, why string) {
		t.Helper()
		began := time.Now()
		took := e.waitScale(ctx, t, ns, name, hpa.Name, n, bound)
		_, err := e.waitPods(ctx, ns, name, int(n)*inferenceGroupSize, b.running)
		must(t, err)
		t.Logf("%s -> %d groups wanted in %v (bound %v), their pods Running %v after", why, n, took.Round(time.Millisecond), bound, since(began))
	}

	groups(0, b.read+b.down, "no demand anywhere")
	must(t, e.poll(ctx, b.read, "the HPA to say it scaled to zero", func(ctx context.Context) error {
		h, err := getHPA(ctx, ns, hpa.Name)
		if err == nil && !hasCondition(h, autoscalingv2.ScaledToZero, corev1.ConditionTrue) {
			err = fmt.Errorf("conditions %s", conditions(h))
		}
		return err
	}))
	// At zero the LWS's sum is that of no group, and the pool's that of
	// no queued request.
	e.waitRaw(ctx, t, waitingPath, 0)

	queued := time.Now()
	picker.queue.Store(4)                // requests wait at the gateway, with nowhere to go
	e.waitRaw(ctx, t, frontedPath, 4000) // at zero groups, through the pool's selector
	groups(1, b.read+b.running, "4 requests queued at the picker")
	t.Logf("0 -> 1: the group's pods Running %v after the requests were queued", since(queued))
	// The group takes the requests; its queue grows past one group's worth.
	picker.queue.Store(0)
	waiting.Store(12)
	groups(maxGroups, time.Duration(maxGroups)*b.running, "12 requests waiting in each group's engine")

	// The picker cannot be read, then the engines drain: no scale-down on
	// missing data (the HPA refuses to scale down while a metric is
	// invalid, computeReplicasForMetrics in horizontal.go). The pool's
	// last value is served until it is stale, so it must be gone first.
	picker.down.Store(true)
	e.waitAbsent(ctx, t, poolPath)
	waiting.Store(0)
	e.waitRaw(ctx, t, waitingPath, 0)
	hold := testScaleDownWindow + holdSyncPeriods*suite.opts.HPASyncPeriod
	e.holdGroups(ctx, t, ns, name, hpa.Name, maxGroups, hold)
	t.Logf("picker down, engines drained: %d groups held for %v", maxGroups, hold)
	picker.down.Store(false)
	groups(0, b.read+b.down, "picker back, no demand")

	if picker.served.Load() == 0 {
		t.Error("the picker was never read")
	}
	if n := engines.credentials.Load(); n != 0 {
		t.Errorf("pod endpoints received %d requests with credentials; the token is the picker's alone", n)
	}
	picker.mu.Lock()
	defer picker.mu.Unlock()
	for _, msg := range picker.errs {
		t.Errorf("endpoint picker: %s", msg)
	}
}

func hasCondition(h *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus) bool {
	i := slices.IndexFunc(h.Status.Conditions, func(c autoscalingv2.HorizontalPodAutoscalerCondition) bool { return c.Type == typ })
	return i >= 0 && h.Status.Conditions[i].Status == status
}

// installInferencePools applies the InferencePool CRD of inferencePoolModule
// and waits until it is Established. It stays: CRDs are cluster-wide, and a
// second test installs the same.
func installInferencePools(ctx context.Context, t *testing.T, e *lwsEnv) {
	t.Helper()
	dir, err := cluster.ModuleDir(ctx, inferencePoolModule)
	must(t, err)
	var crd unstructured.Unstructured
	must(t, yaml.Unmarshal(readFile(t, filepath.Join(dir, "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")), &crd.Object))
	crds := e.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("create the InferencePool CRD: %v", err)
	}
	must(t, e.poll(ctx, time.Minute, "the InferencePool CRD to be Established", func(ctx context.Context) error {
		got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		return cluster.ConditionTrue(got, "Established")
	}))
}

// createInferencePool creates the pool of a LeaderWorkerSet's leaders,
// selected by a label of their template as pools select model servers,
// whose picker is the Service name-epp.
func createInferencePool(ctx context.Context, e *lwsEnv, ns, name, lwsName string) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": lwsName}},
			"targetPorts":       []any{map[string]any{"number": int64(8000)}},
			"endpointPickerRef": map[string]any{"name": name + "-epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
	gvr := schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	_, err := e.dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	return err
}

// fakePicker plays an endpoint picker's /metrics on its pod's IP: it admits
// a request as the picker's metrics filter does (controller-runtime
// pkg/metrics/filters/filters.go: a TokenReview with no audience, then a
// SubjectAccessReview for get on the path) and serves
// inference_extension_flow_control_queue_size for its pool, with the labels
// of llm-d-inference-scheduler pkg/epp/metrics/metrics.go, once a request
// has been queued (a gauge vector has no child before).
type fakePicker struct {
	port        int
	pool        string
	queue       atomic.Int64
	down        atomic.Bool
	served      atomic.Int64 // answers with metrics
	mu          sync.Mutex
	user, token string // whose token the picker must receive, and which
	queued      bool
	errs        []string // read when the test ends
}

func startPicker(ctx context.Context, t *testing.T, e *lwsEnv, ns, pool string) *fakePicker {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	must(t, err)
	p := &fakePicker{port: ports[0], pool: pool}
	pod := kwokPod(ns, pool+"-epp-0", suite.fleet.NodeNames[0], map[string]string{"app": pool + "-epp"},
		corev1.Container{Name: "epp", Image: "ghcr.io/llm-d/llm-d-inference-scheduler:v0.8.0"})
	createPods(ctx, t, e.bounds.running, e.watch, pod)
	got, err := suite.cluster.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	must(t, err)
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || !ip.IsLoopback() {
		t.Fatalf("picker pod IP %q is not a loopback address", got.Status.PodIP)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(got.Status.PodIP, strconv.Itoa(p.port)))
	must(t, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: p}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

func (p *fakePicker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		http.Error(w, "picker down", http.StatusServiceUnavailable)
		return
	}
	refuse := func(code int, msg string) {
		p.fail(msg)
		http.Error(w, http.StatusText(code), code)
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		refuse(http.StatusUnauthorized, "a request without a bearer token")
		return
	}
	client := suite.cluster.Client()
	// A review cut short because the scraper gave up on this request (its
	// timeout, while the loaded API server answered slowly) refused nothing.
	abandoned := func(err error) bool { return err != nil && r.Context().Err() != nil }
	review, err := client.AuthenticationV1().TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if abandoned(err) {
		return
	}
	if err != nil || !review.Status.Authenticated {
		var why string
		if review != nil {
			why = review.Status.Error
		}
		refuse(http.StatusUnauthorized, fmt.Sprintf("token refused: %v %s", err, why))
		return
	}
	u := review.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(r.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if abandoned(err) {
		return
	}
	if err != nil || !sar.Status.Allowed {
		refuse(http.StatusForbidden, fmt.Sprintf("%s not allowed get %s: %v", u.Username, r.URL.Path, err))
		return
	}
	q := p.queue.Load()
	p.mu.Lock()
	if token != p.token || u.Username != p.user || !slices.Contains(review.Status.Audiences, apiAudience) {
		p.failLocked(fmt.Sprintf("token of %s for %v is not the one written for %s", u.Username, review.Status.Audiences, p.user))
	}
	p.queued = p.queued || q > 0
	queued := p.queued
	p.mu.Unlock()
	p.served.Add(1)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	if queued {
		_, _ = fmt.Fprintf(w, "# TYPE inference_extension_flow_control_queue_size gauge\n"+
			"inference_extension_flow_control_queue_size{fairness_id=\"default\",inference_pool=%q,model_name=%q,priority=\"0\",target_model_name=%q} %d\n",
			p.pool, inferenceModel, inferenceModel, q)
	}
}

func (p *fakePicker) fail(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failLocked(msg)
}

func (p *fakePicker) failLocked(msg string) {
	if len(p.errs) < 10 {
		p.errs = append(p.errs, msg)
	}
}
