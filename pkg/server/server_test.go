package server

import (
	stdcmp "cmp"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// within1m compares millicores within 1m: the fake's counters are computed
// from a wall clock the server reads a moment later.
var within1m = cmp.Comparer(func(a, b int64) bool { return a-b <= 1 && b-a <= 1 })

func TestServerEndToEnd(t *testing.T) {
	env := startServer(t, "")
	ctx := context.Background()
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			cs := metricsClient(t, env.admin, ct)
			v1List, err := cs.MetricsV1().PodMetricses("").List(ctx, metav1.ListOptions{})
			must(t, err)
			got := map[string]map[string]int64{}
			var ukWindow time.Duration
			for _, m := range v1List.Items {
				key := m.Namespace + "/" + m.Name
				got[key] = map[string]int64{}
				for _, c := range m.Containers {
					got[key][c.Name] = c.Usage.Cpu().MilliValue()
					if mem := c.Usage.Memory().Value(); mem != 64<<20 && m.Namespace != "kraft" {
						t.Errorf("%s/%s memory = %d, want 64Mi", key, c.Name, mem)
					}
				}
				if m.Window.Duration < 10*time.Second {
					t.Errorf("%s window %s, want the ~10s since start", key, m.Window.Duration)
				}
				if key == "kraft/uk-1" {
					ukWindow = m.Window.Duration
				}
			}
			// From ukpd: the fake's clock stood still from setup to the
			// scrapes, so its counter holds 0.3 cores × (setup − start),
			// while the window, by the scraper's clock, runs from the
			// instance's start to the first scrape.
			wantUK := int64(env.ukpdCounter * 1e3 / ukWindow.Seconds())
			if cpu := got["kraft/uk-1"]["app"]; cpu < wantUK-2 || cpu > wantUK+2 {
				t.Errorf("kraft/uk-1 CPU = %dm, want %dm (%.2f core-s over %s)", cpu, wantUK, env.ukpdCounter, ukWindow)
			}
			delete(got, "kraft/uk-1")
			want := map[string]map[string]int64{
				"default/web-1": {"app": 250, "proxy": 50}, "default/web-2": {"app": 500}, "kube-system/dns": {"dns": 10},
				// (0.1 + 0.9) / 2 requested cores × the leader's 1 core.
				"ml/inf-0": {"main": 500}, "ml/inf-0-1": {"main": 900},
			}
			if diff := cmp.Diff(want, got, within1m); diff != "" {
				t.Errorf("v1 pod CPU in millicores (-want +got):\n%s", diff)
			}

			beta, err := cs.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil || len(beta.Items) != 2 {
				t.Errorf("v1beta1 app=web in default: %v, %v; want 2 items", beta, err)
			}
			byField, err := cs.MetricsV1().PodMetricses("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.namespace=kube-system"})
			if err != nil || len(byField.Items) != 1 || byField.Items[0].Name != "dns" {
				t.Errorf("field selector metadata.namespace=kube-system: %v, %v", byField, err)
			}
			one, err := cs.MetricsV1beta1().PodMetricses("default").Get(ctx, "web-2", metav1.GetOptions{})
			must(t, err)
			if _, err = cs.MetricsV1().PodMetricses("default").Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("get missing pod: %v, want NotFound", err)
			}
			nodes, err := cs.MetricsV1().NodeMetricses().List(ctx, metav1.ListOptions{LabelSelector: "pool=n2"})
			must(t, err)
			gotCPU := map[string]int64{"web-2": one.Containers[0].Usage.Cpu().MilliValue()}
			for _, n := range nodes.Items {
				gotCPU[n.Name] = n.Usage.Cpu().MilliValue()
			}
			if diff := cmp.Diff(map[string]int64{"web-2": 500, "n2": 2000}, gotCPU, within1m); diff != "" {
				t.Errorf("v1beta1 get of web-2 and nodes pool=n2, CPU in millicores (-want +got):\n%s", diff)
			}
			if _, err := cs.MetricsV1beta1().NodeMetricses().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
				t.Errorf("v1beta1 get node: %v", err)
			}
		})
	}
}

func TestServerHTTP(t *testing.T) {
	env := startServer(t, "")
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	const ml = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/"
	const lws = ml + "leaderworkersets.leaderworkerset.x-k8s.io/"
	tests := []struct {
		name, path, accept string
		cfg                *rest.Config // env.admin when nil
		wantCode           int          // 200 when 0
		want               []string
	}{
		{name: "healthz without credentials", cfg: env.noCreds, path: "/healthz"},
		{name: "livez without credentials", cfg: env.noCreds, path: "/livez"},
		{name: "readyz names its check", cfg: env.noCreds, path: "/readyz?verbose", want: []string{"metric-storage-ready ok"}},
		{name: "anonymous list is forbidden", cfg: env.noCreds, path: "/apis/metrics.k8s.io/v1/pods", wantCode: 403},
		{name: "unauthorized user is forbidden", cfg: env.stranger, path: "/apis/metrics.k8s.io/v1/pods", wantCode: 403},
		{name: "self-metrics need authorization", cfg: env.noCreds, path: "/metrics", wantCode: 403},
		{name: "discovery prefers a served version", path: "/apis/metrics.k8s.io",
			want: []string{`"preferredVersion":{"groupVersion":"metrics.k8s.io/v1","version":"v1"}`, `"groupVersion":"metrics.k8s.io/v1beta1"`}},
		{name: "v1 resources", path: "/apis/metrics.k8s.io/v1",
			want: []string{`"name":"pods"`, `"kind":"PodMetrics"`, `"name":"nodes"`, `"kind":"NodeMetrics"`}},
		// web-1's two containers of 64Mi each add up to 128Mi.
		{name: "pod table", path: "/apis/metrics.k8s.io/v1/namespaces/default/pods", accept: table,
			want: []string{`"kind":"Table"`, `"name":"CPU"`, `"name":"Memory"`, `"name":"Window"`, `"web-1"`, `"128Mi"`}},
		{name: "node table", path: "/apis/metrics.k8s.io/v1beta1/nodes/n1", accept: table, want: []string{`"kind":"Table"`, `"n1"`, `"64Mi"`}},
		{name: "not found says why", path: "/apis/metrics.k8s.io/v1/namespaces/default/pods/ghost", wantCode: 404,
			want: []string{`"reason":"NotFound"`}},
		{name: "unsupported field selector is a bad request", path: "/apis/metrics.k8s.io/v1/pods?fieldSelector=spec.nodeName%3Dn1",
			wantCode: 400},
		{name: "aggregated leader explains itself", path: "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/inf-0",
			want: []string{`"group-metrics-server.io/policy":"group"`, `"group-metrics-server.io/group-pods-covered":"2"`}},
		{name: "custom metrics discovery", path: "/apis/custom.metrics.k8s.io/v1beta2",
			want: []string{`"name":"pods/lws_group_cpu_utilization"`, `"name":"leaderworkersets.leaderworkerset.x-k8s.io/lws_group_cpu_utilization"`}},
		{name: "group utilization of leader pods",
			path: ml + "pods/%2A/lws_group_cpu_utilization?labelSelector=leaderworkerset.sigs.k8s.io%2Fname%3Dinf",
			want: []string{`"name":"inf-0"`, `"value":"500m"`}},
		{name: "group utilization of the LeaderWorkerSet object",
			path: "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/leaderworkersets.leaderworkerset.x-k8s.io/inf/lws_group_cpu_utilization",
			want: []string{`"kind":"LeaderWorkerSet"`, `"name":"inf"`, `"value":"500m"`}},
		// At zero groups (the leader StatefulSet alone): a sum of nothing
		// is 0, a utilization of nothing has no value; an unknown
		// LeaderWorkerSet is not found.
		{name: "a LeaderWorkerSet at zero groups uses nothing", path: lws + "idle/lws_group_cpu_usage",
			want: []string{`"kind":"LeaderWorkerSet"`, `"name":"idle"`, `"value":"0"`}},
		{name: "a LeaderWorkerSet at zero groups has no utilization", path: lws + "idle/lws_group_cpu_utilization",
			wantCode: 404, want: []string{"the ratio of nothing is undefined"}},
		{name: "an unknown LeaderWorkerSet is not found", path: lws + "ghost/lws_group_cpu_usage",
			wantCode: 404, want: []string{"no pods of this LeaderWorkerSet are known"}},
		{name: "worker pods have no group metrics", path: ml + "pods/inf-0-1/lws_group_cpu_usage", wantCode: 404},
		{name: "openapi v2", path: "/openapi/v2", accept: "application/json", want: []string{"PodMetrics", "NodeMetrics"}},
		{name: "openapi v3", path: "/openapi/v3/apis/metrics.k8s.io/v1", want: []string{"PodMetrics"}},
		// The core/v1 type custom metrics refer to is served; the rest of
		// core/v1 is not kept (apiserver.mergeDefinitions).
		{name: "openapi v3 of custom metrics", path: "/openapi/v3/apis/custom.metrics.k8s.io/v1beta2",
			want: []string{"io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValue", "io.k8s.api.core.v1.ObjectReference"}},
		{name: "self-metrics", path: "/metrics", want: []string{"group_metrics_server_scraper_targets", "group_metrics_server_store_points"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := env.get(t, stdcmp.Or(tc.cfg, env.admin), tc.path, tc.accept)
			if want := stdcmp.Or(tc.wantCode, 200); code != want {
				t.Fatalf("GET %s = %d, want %d\n%.2000s", tc.path, code, want, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s: body lacks %s\n%.2000s", tc.path, w, body)
				}
			}
		})
	}
}

// TestKubeletCertificateHintInNotFound runs a server whose node n2 has a
// kubelet certificate without IP SANs (dialled at 127.0.0.1): a get of a pod
// on n2 is a NotFound StatusError whose message names the x509 error and its
// fix, while n1's pods are served.
func TestKubeletCertificateHintInNotFound(t *testing.T) {
	env := startServer(t, "n2")
	mc := metricsClient(t, env.admin, "application/json")
	ctx := context.Background()
	if _, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod on the healthy node n1: %v", err)
	}
	_, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "web-2", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("pod on n2: %v, want NotFound", err)
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) {
		t.Fatalf("pod on n2: %T is not a StatusError", err)
	}
	msg := status.ErrStatus.Message
	for _, want := range []string{`node "n2" is unreachable`, "doesn't contain any IP SANs", "serverTLSBootstrap", "--kubelet-preferred-address-types", kubelet.TroubleshootingDoc} {
		if !strings.Contains(msg, want) {
			t.Errorf("NotFound message lacks %q:\n%s", want, msg)
		}
	}
}

// kitNames reads the metric families the monitoring kit uses
// (manifests/components/monitoring/metric-names.txt; test/monitoring checks
// that the kit's rules and panels use exactly these).
func kitNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../manifests/components/monitoring/metric-names.txt")
	must(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatal("metric-names.txt lists no name")
	}
	return out
}

// servedFamilies lists pods and nodes through env's server, which observes
// the served-age histograms and the request metrics, and returns the
// families on its authorized /metrics.
func servedFamilies(t *testing.T, env *testEnv) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := context.Background()
	mc := metricsClient(t, env.admin, "application/json")
	_, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{})
	must(t, err)
	_, err = mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	must(t, err)
	code, body := env.get(t, env.admin, "/metrics", "text/plain")
	if code != 200 {
		t.Fatalf("GET /metrics = %d\n%.2000s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// TestMonitoringKitMetricsServed checks that a running server (with
// --group-metrics-series and an LWS group) serves every family the
// monitoring kit's alerts and dashboard use; the certificate controller's
// families are checked in pkg/certs, on its registry.
func TestMonitoringKitMetricsServed(t *testing.T) {
	families := servedFamilies(t, startServer(t, ""))
	checked := 0
	for _, name := range kitNames(t) {
		if strings.HasPrefix(name, "group_metrics_server_certs_") {
			continue
		}
		if checked++; len(families[name].GetMetric()) == 0 {
			t.Errorf("the monitoring kit uses %s, which /metrics does not serve", name)
		}
	}
	t.Logf("%d families of the kit served, of %d on /metrics", checked, len(families))
}

// TestMigrationMetricsServed checks that a running server, one of whose
// kubelets fails verification, serves every family docs/migration.md gives
// in place of one of metrics-server's own series.
func TestMigrationMetricsServed(t *testing.T) {
	families := servedFamilies(t, startServer(t, "n2"))
	b, err := os.ReadFile("../../docs/migration.md")
	must(t, err)
	ours := regexp.MustCompile("`(group_metrics_server_[a-z_]+)")
	checked := 0
	for _, l := range strings.Split(string(b), "\n") {
		cols := strings.Split(l, " | ")
		if !strings.HasPrefix(l, "| `metrics_server_") || len(cols) < 2 {
			continue
		}
		for _, m := range ours.FindAllStringSubmatch(cols[1], -1) {
			if checked++; len(families[strings.TrimSuffix(m[1], "_count")].GetMetric()) == 0 {
				t.Errorf("docs/migration.md gives %s for %s, and /metrics does not serve it", m[1], strings.Trim(cols[0], "| `"))
			}
		}
	}
	if checked == 0 {
		t.Fatal("docs/migration.md gives no series of ours for metrics-server's")
	}
}

// TestEndpointPods: the pod cache as the pod-endpoint source lists it:
// Running pods with an IP and not being deleted, with the scrape
// annotations the cache keeps (its own and, when configured, the
// prometheus.io ones) and nothing else.
func TestEndpointPods(t *testing.T) {
	idx := podcache.NewPodIndex()
	pod := func(name string, phase corev1.PodPhase, ip string, ready bool, mutate func(*corev1.Pod)) {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: phase, PodIP: ip},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "vllm"},
				Annotations: map[string]string{promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: "8000",
					"prometheus.io/scrape": "true", "kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		if mutate != nil {
			mutate(p)
		}
		idx.Set(podcache.NewPod(p))
	}
	pod("ready", corev1.PodRunning, "10.0.0.1", true, nil)
	pod("unready", corev1.PodRunning, "10.0.0.2", false, nil)
	pod("no-ip", corev1.PodRunning, "", true, nil)
	pod("pending", corev1.PodPending, "10.0.0.3", false, nil)
	pod("deleting", corev1.PodRunning, "10.0.0.4", true, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })

	annotations := map[string]string{promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: "8000", "prometheus.io/scrape": "true"}
	want := []promscrape.Pod{
		{Namespace: "ml", Name: "ready", UID: "uid-ready", Labels: map[string]string{"app": "vllm"}, Annotations: annotations, IP: "10.0.0.1", Node: "n1", Running: true, Ready: true},
		{Namespace: "ml", Name: "unready", UID: "uid-unready", Labels: map[string]string{"app": "vllm"}, Annotations: annotations, IP: "10.0.0.2", Node: "n1", Running: true},
	}
	if diff := cmp.Diff(want, endpointPods{idx}.ListPods()); diff != "" {
		t.Errorf("ListPods (-want +got):\n%s", diff)
	}
}

// fakeCA is a CA bundle that is loaded or not.
type fakeCA struct{ bundle []byte }

func (f *fakeCA) Name() string                   { return "fake" }
func (f *fakeCA) CurrentCABundleContent() []byte { return f.bundle }
func (f *fakeCA) VerifyOptions() (x509.VerifyOptions, bool) {
	return x509.VerifyOptions{}, len(f.bundle) > 0
}
func (f *fakeCA) AddListener(dynamiccertificates.Listener) {}

func TestAuthenticationReady(t *testing.T) {
	client, front := &fakeCA{}, &fakeCA{}
	api := &genericapiserver.RecommendedConfig{}
	api.SecureServing = &genericapiserver.SecureServingInfo{ClientCA: client}
	api.Authentication.RequestHeaderConfig = &authenticatorfactory.RequestHeaderConfig{CAContentProvider: front,
		UsernameHeaders: headerrequest.StaticStringSlice{"X-Remote-User"}}
	ready := authenticationReady(api)
	if err := ready(nil); err == nil {
		t.Fatal("ready before any CA is loaded")
	}
	client.bundle = []byte("ca")
	if err := ready(nil); err == nil {
		t.Fatal("ready before the front proxy CA is loaded")
	}
	front.bundle = []byte("ca")
	if err := ready(nil); err != nil {
		t.Fatalf("not ready with both CAs loaded: %v", err)
	}
	// Without delegated authentication there is nothing to wait for.
	if err := authenticationReady(&genericapiserver.RecommendedConfig{})(nil); err != nil {
		t.Fatalf("not ready without CAs to load: %v", err)
	}
}
