package certs

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	testNS      = "kube-system"
	caName      = "gms-ca"
	servingName = "gms-serving-cert"
	dnsName     = "group-metrics-server.kube-system.svc"
)

var (
	t0           = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ourService   = ServiceRef{Namespace: testNS, Name: "group-metrics-server", Port: 443}
	apiServiceV1 = []string{"v1beta1.metrics.k8s.io", "v1.metrics.k8s.io"}
	testPolicy   = Policy{DNSNames: []string{dnsName}, CAValidity: 3 * time.Hour, ServingValidity: 30 * time.Minute, Propagation: 5 * time.Minute}
)

// apiService returns an APIService named name pointing at svc.
func apiService(name string, svc ServiceRef, insecure bool) *unstructured.Unstructured {
	spec := map[string]any{"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": int64(100), "versionPriority": int64(100),
		"service": map[string]any{"namespace": svc.Namespace, "name": svc.Name, "port": int64(svc.Port)}}
	if insecure {
		spec["insecureSkipTLSVerify"] = true
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{APIServiceResource: "APIServiceList"}, objs...)
}

// newKube holds the two Secrets as the manifests ship them.
func newKube() *fake.Clientset {
	return fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: caName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: servingName}})
}

type rig struct {
	kube *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
	clk  *clocktesting.FakeClock
	ctrl *Controller
}

// newRig is a controller of both metrics.k8s.io APIServices; a nil dyn
// holds both, pointing at our Service.
func newRig(clk *clocktesting.FakeClock, kube *fake.Clientset, dyn *dynamicfake.FakeDynamicClient) *rig {
	if dyn == nil {
		dyn = newDynamic(apiService(apiServiceV1[0], ourService, false), apiService(apiServiceV1[1], ourService, false))
	}
	ctrl := NewController(ControllerConfig{
		Secrets: kube.CoreV1(), Namespace: testNS, CASecret: caName, ServingSecret: servingName,
		APIServices: NewAPIServices(APIServicesConfig{
			Client: dyn, Names: apiServiceV1, Service: ourService, RecreateAfter: 10 * time.Second,
			Labels: map[string]string{"app.kubernetes.io/name": "group-metrics-server"},
			Owner:  &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "owner", UID: "uid-1"},
		}),
		Policy: testPolicy, SyncPeriod: 15 * time.Second, Clock: clk,
	})
	return &rig{kube: kube, dyn: dyn, clk: clk, ctrl: ctrl}
}

func (r *rig) sync(t *testing.T) time.Duration {
	t.Helper()
	wait, err := r.ctrl.Sync(context.Background())
	if err != nil {
		t.Fatalf("sync at %s: %v", r.clk.Now().Format(time.RFC3339), err)
	}
	return wait
}

// writes counts the create, update and patch actions recorded so far.
func (r *rig) writes() int {
	n := 0
	for _, a := range append(r.kube.Actions(), r.dyn.Actions()...) {
		switch a.GetVerb() {
		case "create", "update", "patch":
			n++
		}
	}
	return n
}

// refuse makes the rig's fake clients fail every verb on resource.
func refuse(verb, resource string) func(*rig) {
	return func(r *rig) {
		f := func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, errors.New("refused") }
		if resource == "secrets" {
			r.kube.PrependReactor(verb, resource, f)
		} else {
			r.dyn.PrependReactor(verb, resource, f)
		}
	}
}

func secret(t *testing.T, kube *fake.Clientset, name string) *corev1.Secret {
	t.Helper()
	s, err := kube.CoreV1().Secrets(testNS).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	return s
}

func getAPIService(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := dyn.Resource(APIServiceResource).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	return obj
}

func caBundleOf(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) []byte {
	t.Helper()
	s, _, _ := unstructured.NestedString(getAPIService(t, dyn, name).Object, "spec", "caBundle")
	b, err := base64.StdEncoding.DecodeString(s)
	must(t, err)
	return b
}

// verifies says whether the serving certificate certPEM verifies for
// dnsName against bundle at now.
func verifies(certPEM, bundle []byte, now time.Time) error {
	leaf, err := parseCert(certPEM)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: pool, CurrentTime: now})
	return err
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
