package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/apiserver"
	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet/summarytest"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

const (
	kubeletToken = "kubelet-test-token"
	ukpdToken    = "ukpd-test-token"
)

// fakeKubelet serves a Summary in which every container has used `cores`
// since start, so the first sample already yields exactly that rate.
type fakeKubelet struct {
	node  string
	start time.Time
	pods  []*corev1.Pod
	cores map[string]float64 // "ns/pod/container" -> cores
	mem   uint64
}

func (f *fakeKubelet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+kubeletToken {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/stats/summary" || r.URL.Query().Get("only_cpu_and_memory") != "true" {
		http.NotFound(w, r)
		return
	}
	// A Summary's times are whole seconds (metav1.Time), so the counters
	// are those of whole seconds too.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	elapsed := now.Sub(f.start).Seconds()
	entry := func(name string, cores float64) stats.ContainerStats {
		return stats.ContainerStats{Name: name, StartTime: metav1.NewTime(f.start),
			CPU: summarytest.CPU(now, uint64(cores*1e9), uint64(cores*elapsed*1e9)), Memory: summarytest.Memory(now, f.mem, 0)}
	}
	node := entry("", 2)
	s := &stats.Summary{Node: stats.NodeStats{NodeName: f.node, StartTime: node.StartTime, CPU: node.CPU, Memory: node.Memory}}
	for _, p := range f.pods {
		ps := stats.PodStats{PodRef: stats.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}, StartTime: metav1.NewTime(f.start)}
		for _, c := range p.Spec.Containers {
			ps.Containers = append(ps.Containers, entry(c.Name, f.cores[p.Namespace+"/"+p.Name+"/"+c.Name]))
		}
		s.Pods = append(s.Pods, ps)
	}
	_, _ = w.Write(summarytest.Encode(s))
}

// lwsMember is a pod of group 0 of LeaderWorkerSet "inf" in namespace ml,
// requesting one core; the leader asks for the group policy. It is
// controlled by its StatefulSet, as the LeaderWorkerSet controller builds
// it (lwsStatefulSets): the leader by StatefulSet inf, the workers by
// StatefulSet inf-0.
func lwsMember(name, worker, node string) *corev1.Pod {
	p := runningPod("ml", name, node, map[string]string{
		group.LabelName: "inf", group.LabelGroupIndex: "0", group.LabelWorkerIndex: worker,
	}, "main")
	set := "inf"
	if worker != "0" {
		set = "inf-0"
	}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set, UID: types.UID("uid-sts-" + set), Controller: ptr.To(true)}}
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	if worker == "0" {
		p.Annotations = map[string]string{group.AnnotationPolicy: string(group.PolicyGroup)}
	}
	// Ready for long past the HPA's initialization period, so the HPA's
	// readiness rule counts its CPU.
	since := metav1.NewTime(time.Now().Add(-time.Hour))
	p.Status.StartTime = &since
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since}}
	return p
}

// lwsStatefulSets are the metadata of LeaderWorkerSet inf's StatefulSets
// in namespace ml: inf, controlled by the LeaderWorkerSet, and inf-0,
// controlled by the leader pod inf-0 (lwsMember); and the leader
// StatefulSet of LeaderWorkerSet idle, scaled to zero groups: no pods.
func lwsStatefulSets(t *testing.T) *metadatafake.FakeMetadataClient {
	set := func(lws, name string, owner metav1.OwnerReference) runtime.Object {
		owner.Controller = ptr.To(true)
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-sts-" + name),
				Labels: map[string]string{group.LabelName: lws}, OwnerReferences: []metav1.OwnerReference{owner}},
		}
	}
	lws := func(name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: name, UID: types.UID("uid-lws-" + name)}
	}
	scheme := metadatafake.NewTestScheme()
	must(t, metav1.AddMetaToScheme(scheme))
	return metadatafake.NewSimpleMetadataClient(scheme,
		set("inf", "inf", lws("inf")),
		set("inf", "inf-0", metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "inf-0", UID: "uid-inf-0"}),
		set("idle", "idle", lws("idle")),
	)
}

func runningPod(ns, name, node string, lbls map[string]string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

type testEnv struct {
	base                     string
	admin, noCreds, stranger *rest.Config
	// ukpdCounter is the CPU counter, in core-seconds, of the one ukpd
	// instance: its fake clock stands still after setup.
	ukpdCounter float64
}

// startServer runs the whole server in-process against a fake API, two
// fake kubelets over TLS and a fake ukpd, and returns once /readyz passes.
// The kubelet of node noIPSANNode, if any, serves a certificate that names
// only its hostname, as a self-signed kubelet certificate does.
func startServer(t *testing.T, noIPSANNode string) *testEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	kubeletCA := newTestCA(t)
	objects := startKubelets(t, kubeletCA, noIPSANNode)
	ukpdObjects, ukpdURL, ukpdCounter := startUkpd(t)
	ukpdTokenFile := writeFile(t, dir, "ukpd-token", []byte(ukpdToken))
	api, ln, servingCA, clientCA := apiConfig(t, dir)
	cfg := &Config{
		API: api, Kube: fake.NewClientset(append(objects, ukpdObjects...)...), Metadata: lwsStatefulSets(t),
		Kubelet: kubelet.ClientConfig{MaxResponseBytes: 1 << 20,
			REST: &rest.Config{BearerToken: kubeletToken, TLSClientConfig: rest.TLSClientConfig{CAData: kubeletCA.pem}}},
		KubeletPort: 1, KubeletUseNodeStatusPort: true, KubeletAddressTypes: []corev1.NodeAddressType{corev1.NodeInternalIP},
		CustomMetrics: true, GroupMetricsSeries: true, Sources: []string{kubelet.SourceName, ukpd.SourceName},
		KraftletSelector: labels.SelectorFromSet(labels.Set{"unikraft.com/virtual-kubelet": "true"}),
		Ukpd:             ukpd.SourceConfig{Endpoints: []ukpd.EndpointConfig{{URL: ukpdURL}}, TokenFile: ukpdTokenFile},
		Resolution:       time.Minute, Timeout: 10 * time.Second, Concurrency: 4,
		// Bounded as by default, so the limit sits in the handler chain.
		Reads: apiserver.ReadLimit{Concurrent: 1, Wait: 10 * time.Second},
	}
	srv, err := cfg.Complete().New()
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server exited with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("server did not stop within 30s")
		}
	})

	base := "https://" + ln.Addr().String()
	client := func(cn string, orgs ...string) *rest.Config {
		c := &rest.Config{Host: base, TLSClientConfig: rest.TLSClientConfig{CAData: servingCA.pem}}
		if cn != "" {
			c.CertData, c.KeyData = clientCA.issue(t, cn, orgs)
		}
		return c
	}
	env := &testEnv{base: base, admin: client("admin", "system:masters"), noCreds: client(""), stranger: client("stranger", "nobody"), ukpdCounter: ukpdCounter}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := env.get(t, env.noCreds, "/readyz", "")
		return code == http.StatusOK, nil
	}); err != nil {
		_, body := env.get(t, env.noCreds, "/readyz?verbose", "")
		t.Fatalf("server not ready: %v\n%s", err, body)
	}
	return env
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, data, 0o600))
	return p
}

// startKubelets serves n1 and n2 over TLS and returns their pods and nodes.
func startKubelets(t *testing.T, ca *testCA, noIPSANNode string) []runtime.Object {
	start := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	pods := []*corev1.Pod{
		runningPod("default", "web-1", "n1", map[string]string{"app": "web"}, "app", "proxy"),
		runningPod("default", "web-2", "n2", map[string]string{"app": "web"}, "app"),
		runningPod("kube-system", "dns", "n2", map[string]string{"app": "dns"}, "dns"),
		lwsMember("inf-0", "0", "n1"),
		lwsMember("inf-0-1", "1", "n2"),
	}
	objects := make([]runtime.Object, 0, len(pods))
	for _, p := range pods {
		objects = append(objects, p)
	}
	cores := map[string]float64{
		"default/web-1/app": 0.25, "default/web-1/proxy": 0.05, "default/web-2/app": 0.5, "kube-system/dns/dns": 0.01,
		// An LWS group in group mode: the leader idles, the worker works.
		"ml/inf-0/main": 0.1, "ml/inf-0-1/main": 0.9,
	}
	for _, name := range []string{"n1", "n2"} {
		fk := &fakeKubelet{node: name, start: start, cores: cores, mem: 64 << 20}
		for _, p := range pods {
			if p.Spec.NodeName == name {
				fk.pods = append(fk.pods, p)
			}
		}
		hosts := []string{"127.0.0.1", "localhost"}
		if name == noIPSANNode {
			hosts = []string{name}
		}
		ep, err := fakecore.NewEndpoint(fakecore.EndpointConfig{Handler: fk, CA: ca.ca, Leaf: pki.Leaf{CommonName: name, Hosts: hosts, Server: true}})
		must(t, err)
		t.Cleanup(func() { _ = ep.Close() })
		objects = append(objects, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name}},
			Status: corev1.NodeStatus{
				Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
				DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(netip.MustParseAddrPort(ep.Addr()).Port())}},
			},
		})
	}
	return objects
}

// startUkpd serves a kraftlet node whose pod runs as a unikernel instance
// behind ukpd. Its instance started 10 s ago on a whole second (started_at
// carries seconds), and has used 0.3 cores since. counter is its CPU
// counter in core-seconds, from its start to the fake clock's setting.
func startUkpd(t *testing.T) (objects []runtime.Object, url string, counter float64) {
	start := time.Now().Truncate(time.Second).Add(-10 * time.Second)
	clk := clocktesting.NewFakeClock(start)
	f := fakeukpd.New(fakeukpd.Config{Clock: clk, Tokens: []string{ukpdToken}})
	t.Cleanup(f.Close)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	_, err := f.AddInstance(fakeukpd.InstanceSpec{Namespace: "kraft", Pod: "uk-1", Container: "app", Node: "k1", CPUCores: 0.3, RSSBytes: 32 << 20})
	must(t, err)
	set := time.Now()
	clk.SetTime(set)
	return []runtime.Object{runningPod("kraft", "uk-1", "k1", map[string]string{"app": "uk"}, "app"), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "k1", Labels: map[string]string{"unikraft.com/virtual-kubelet": "true"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}},
	}}, srv.URL, 0.3 * set.Sub(start).Seconds()
}

// apiConfig serves on a loopback listener with a certificate of servingCA,
// and authenticates clients by certificates of clientCA.
func apiConfig(t *testing.T, dir string) (api *genericapiserver.RecommendedConfig, ln net.Listener, servingCA, clientCA *testCA) {
	servingCA, clientCA = newTestCA(t), newTestCA(t)
	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress, serving.BindPort = net.ParseIP("127.0.0.1"), 0
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	serving.Listener = ln
	cert, key := servingCA.issue(t, "group-metrics-server", nil, "127.0.0.1", "localhost")
	serving.ServerCert.GeneratedCert, err = dynamiccertificates.NewStaticCertKeyContent("test", cert, key)
	must(t, err)
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFileOptional, authn.SkipInClusterLookup = true, true
	authn.ClientCert.ClientCA = writeFile(t, dir, "client-ca.crt", clientCA.pem)
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFileOptional = true
	api = genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	must(t, serving.ApplyTo(&api.SecureServing, &api.LoopbackClientConfig))
	must(t, authn.ApplyTo(&api.Authentication, api.SecureServing, nil))
	must(t, authz.ApplyTo(&api.Authorization))
	return api, ln, servingCA, clientCA
}

// get does a raw GET and returns the status and body.
func (e *testEnv) get(t *testing.T, cfg *rest.Config, path, accept string) (int, string) {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	must(t, err)
	req, _ := http.NewRequest(http.MethodGet, e.base+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func metricsClient(t *testing.T, cfg *rest.Config, contentType string) *metricsclient.Clientset {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.ContentType = contentType
	if contentType == "application/vnd.kubernetes.protobuf" {
		c.AcceptContentTypes = contentType
	}
	cs, err := metricsclient.NewForConfig(c)
	must(t, err)
	return cs
}

// testCA signs serving and client certificates for in-process tests.
type testCA struct {
	ca  *pki.CA
	pem []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	must(t, err)
	return &testCA{ca: ca, pem: ca.CertPEM()}
}

// issue returns a PEM pair: a serving pair for hosts, or a client pair
// when there are none.
func (ca *testCA) issue(t *testing.T, cn string, orgs []string, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	l := pki.Leaf{CommonName: cn, Organizations: orgs, Hosts: hosts, Server: len(hosts) > 0, Client: len(hosts) == 0}
	certPEM, keyPEM, err := ca.ca.Issue(time.Now(), l)
	must(t, err)
	return certPEM, keyPEM
}
