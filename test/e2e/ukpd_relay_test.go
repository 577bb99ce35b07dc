//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// relayName names the relays' objects in manifests/components/ukpd-relay, and is the name their shared
// serving certificate is for.
const relayName = "group-metrics-server-ukpd-relay"

// relayHost is one host of the per-host topology: a kraftlet node whose address is the host's own loopback
// address, a ukpd that listens there in plain HTTP with a token of its own, and the relay beside it.
type relayHost struct {
	node, addr string
	ukpd       *fakeukpd.Running
	sync       *env.InstanceSync
}

// TestUkpdRelays runs self-hosted ukpd as it is deployed: three hosts, each with a ukpd on its loopback
// address and a relay (the shipped DaemonSet's command line, ServiceAccount and binding). A server of the
// test's own, with the shipped component's flags and no ukpd token, finds one relay per kraftlet node at the
// node's address.
func TestUkpdRelays(t *testing.T) {
	ctx := begin(t, 9*time.Minute)
	const ns = "e2e-ukpd-relays"
	newNamespace(ctx, t, ns)
	hosts, serverArgs := startRelayHosts(ctx, t, 3, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	s := deployOwnServer(ctx, t, "group-metrics-server-relays", serverArgs)
	bound := staleBound() + hpaSlack

	// A pod on each host, two on the first.
	var pods []*corev1.Pod
	for i, h := range hosts {
		for j := range 1 + btoi(i == 0) {
			pods = append(pods, kraftletPod(ns, fmt.Sprintf("host-%d-%d", i+1, j), h.node))
		}
	}
	createPods(ctx, t, bound, watched(), pods...)
	want := topWant{}
	for _, p := range pods {
		want[p.Name] = topRow{milliCPU: 40, memory: "64Mi"}
	}
	watch := append(watched(), s.Process)
	waitTop(ctx, t, suite.cluster, watch, ns, want, bound)
	waitTopNodes(ctx, t, "kraftlet-host-", topWant{
		hosts[0].node: {milliCPU: 80, memory: "128Mi"},
		hosts[1].node: {milliCPU: 40, memory: "64Mi"},
		hosts[2].node: {milliCPU: 40, memory: "64Mi"},
	}, bound)

	t.Run("containerID", func(t *testing.T) {
		// An instance tagged for host-1-1, which kraftlet records as host-1-0's container: served to
		// host-1-0, and counted.
		h := hosts[0]
		forged, err := h.ukpd.AddInstance(fakeukpd.InstanceSpec{
			Namespace: ns, Pod: "host-1-1", Container: "app", Node: h.node, UUID: uuid.NewString(), CPUCores: 0.077, RSSBytes: 32 << 20,
		})
		must(t, err)
		before := mustMetric(ctx, t, s, "group_metrics_server_ukpd_tag_conflicts_total")
		setContainerID(ctx, t, ns, "host-1-0", "unikraft://"+forged.UUID)
		want["host-1-0"] = topRow{milliCPU: 77, memory: "32Mi"}
		waitTop(ctx, t, suite.cluster, watch, ns, want, bound)
		if got := mustMetric(ctx, t, s, "group_metrics_server_ukpd_tag_conflicts_total"); got <= before {
			t.Errorf("tag conflicts counted: %v, then %v; want more", before, got)
		}
	})

	t.Run("hpa", func(t *testing.T) {
		uk := env.DeploymentSpec{Namespace: ns, Name: "uk", Replicas: 1, CPURequest: "100m"}
		runKraftletDeployment(ctx, t, uk)
		var syncs []*env.InstanceSync
		for _, h := range hosts {
			syncs = append(syncs, h.sync)
		}
		testUkpdHPA(ctx, t, syncs, func(ns, prefix string) (n int) {
			for _, h := range hosts {
				n += instancesIn(h.ukpd.Instances(), ns, prefix)
			}
			return n
		}, uk)
	})

	// Only each host's relay reached its ukpd, from the host's address, always with the token; the suite's
	// credential scan looks for the tokens in every log and answer.
	for _, h := range hosts {
		if c := h.ukpd.Clients(); len(c) != 1 || c[0].IP != h.addr || c[0].Unauthorized != 0 || c[0].Requests == 0 {
			t.Errorf("ukpd of %s (%s) was reached by %+v, want its relay alone, always with the token", h.node, h.addr, c)
		} else {
			t.Logf("ukpd of %s: %d requests, all from its relay", h.node, c[0].Requests)
		}
	}
}

// startRelayHosts starts n hosts and returns them with the server flags that find their relays: the
// ukpd-relay component's, with the relays' CA.
func startRelayHosts(ctx context.Context, t *testing.T, n int, usage env.UkpdUsage) ([]*relayHost, []string) {
	t.Helper()
	relayArgs, serverArgs := applyRelayObjects(ctx, t)
	kubeconfig, err := suite.cluster.ServiceAccountKubeconfig(ctx, "kube-system", relayName)
	must(t, err)
	dir := t.TempDir()
	ca, err := pki.NewCA("e2e ukpd relays", time.Now(), time.Hour)
	must(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	must(t, os.WriteFile(caFile, ca.CertPEM(), 0o600))
	// One pair for every relay, for the name they share, as the component's Secret holds it.
	certFile, keyFile, err := ca.IssueFiles(time.Now(), dir, "relay", pki.Leaf{CommonName: relayName, Hosts: []string{relayName}, Server: true})
	must(t, err)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	port := strconv.Itoa(ports[0])
	local := []string{"--kubeconfig=" + kubeconfig, "--secure-port=" + port,
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile}
	// Hosts of this test process on their own /24 of loopback, so that shards running at once never share an
	// address.
	prefix := fmt.Sprintf("127.0.%d.", 1+os.Getpid()%250)
	hosts := make([]*relayHost, 0, n)
	for i := 1; i <= n; i++ {
		host := fmt.Sprintf("host-%d", i)
		h := &relayHost{node: "kraftlet-" + host, addr: prefix + strconv.Itoa(i)}
		token := fmt.Sprintf("ukpd-token-host-%d-%s", i, uuid.NewString())
		suiteSecrets.add("ukpd token of "+h.node, token)
		h.ukpd, err = fakeukpd.Start(fakeukpd.Options{Config: fakeukpd.Config{Tokens: []string{token}}, Listen: h.addr + ":0"})
		must(t, err)
		t.Cleanup(func() { _ = h.ukpd.Close() })
		tokenFile := filepath.Join(dir, h.node+".token")
		must(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
		// The DaemonSet's args as the kubelet expands them on the host (its node's name, its IP), then what a
		// process here needs.
		expand := strings.NewReplacer("$(HOST_NODE_NAME)", host, "$(HOST_IP)", h.addr)
		var args []string
		for _, a := range relayArgs {
			args = append(args, expand.Replace(a))
		}
		args = append(append(args, local...), "--ukpd-url="+h.ukpd.URL, "--ukpd-token-file="+tokenFile)
		proc, err := suite.cluster.StartProcess("ukpd-relay-"+h.node, filepath.Join(suite.binDir, "group-metrics-server"), args...)
		must(t, err)
		t.Cleanup(func() { _ = proc.Stop() })
		waitRelay(ctx, t, proc, ca.CertPEM(), net.JoinHostPort(h.addr, port))

		must(t, env.AddKraftletNodeAt(ctx, suite.cluster, h.node, h.addr))
		cleanup(t, "delete node "+h.node, func(ctx context.Context) error {
			return suite.cluster.Client().CoreV1().Nodes().Delete(ctx, h.node, metav1.DeleteOptions{})
		})
		h.sync = syncKraftletNode(ctx, t, h.node, env.UkpdControl{Address: h.ukpd.ControlAddress}, usage)
		hosts = append(hosts, h)
	}
	return hosts, append(serverArgs, "--ukpd-relay-port="+port, "--ukpd-relay-certificate-authority="+caFile)
}

// applyRelayObjects applies the ukpd-relay component's ServiceAccount and binding, deleted when the test
// ends, and returns the DaemonSet's container args and the args the component adds to the server's, but for
// the port and the CA file, which depend on the test.
func applyRelayObjects(ctx context.Context, t *testing.T) (relayArgs, serverArgs []string) {
	t.Helper()
	objs, err := env.Render(ctx, suite.cluster, repoPath(t, "manifests", "examples", "ukpd-relays"))
	must(t, err)
	var own []*unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetKind() == "DaemonSet" && o.GetName() == relayName:
			relayArgs = containerArgs(t, o)
		case o.GetKind() == "Deployment" && o.GetName() == serverDeployment:
			for _, a := range containerArgs(t, o) {
				if strings.HasPrefix(a, "--sources=") || strings.HasPrefix(a, "--ukpd-relay-server-name=") {
					serverArgs = append(serverArgs, a)
				}
			}
		case strings.HasPrefix(o.GetName(), relayName):
			own = append(own, o)
		}
	}
	if len(relayArgs) == 0 || len(serverArgs) != 2 || len(own) != 2 {
		t.Fatalf("the ukpd-relay component: relay args %q, server args %q, %d objects of the relay; "+
			"want a DaemonSet, two server args, a ServiceAccount and its binding", relayArgs, serverArgs, len(own))
	}
	must(t, env.Apply(ctx, suite.cluster, relayName, own))
	client := suite.cluster.Client()
	cleanup(t, "delete the relay's binding and ServiceAccount", func(ctx context.Context) error {
		if err := client.RbacV1().ClusterRoleBindings().Delete(ctx, relayName+":system:auth-delegator", metav1.DeleteOptions{}); err != nil {
			return err
		}
		return client.CoreV1().ServiceAccounts("kube-system").Delete(ctx, relayName, metav1.DeleteOptions{})
	})
	return relayArgs, serverArgs
}

// containerArgs returns the args of the first container of o's pod template.
func containerArgs(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	specs := podSpecs(t, o)
	if len(specs) != 1 || len(specs[0].Containers) == 0 {
		t.Fatalf("%s %s: no container", o.GetKind(), o.GetName())
	}
	return specs[0].Containers[0].Args
}

// waitRelay waits until the relay at hostPort answers /healthz over TLS verified for the relays' shared name.
func waitRelay(ctx context.Context, t *testing.T, proc *cluster.Process, caPEM []byte, hostPort string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: relayName}}}
	defer client.CloseIdleConnections()
	must(t, cluster.Poll(ctx, "relay "+hostPort+" to answer /healthz", append(watched(), proc), func(ctx context.Context) error {
		code, body, err := env.Get(ctx, client, "https://"+hostPort+"/healthz")
		return cmp.Or(err, wantf(code == http.StatusOK, "status %d: %.200s", code, body))
	}))
}

// waitTopNodes waits until kubectl top node shows the nodes whose names start with prefix exactly as want
// says.
func waitTopNodes(ctx context.Context, t *testing.T, prefix string, want topWant, bound time.Duration) {
	t.Helper()
	var out string
	err := pollBounded(ctx, bound, "kubectl top node", func(ctx context.Context) error {
		stdout, stderr, err := suite.cluster.Kubectl(ctx, "top", "node")
		if err != nil {
			return fmt.Errorf("%w: %s", err, stderr)
		}
		out = stdout
		got := map[string][]string{}
		for name, row := range parseTable(out).byKey(1) {
			// NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
			if strings.HasPrefix(name, prefix) && len(row) >= 4 {
				got[name] = []string{row[0], row[1], row[3]}
			}
		}
		return want.check(got)
	})
	if err != nil {
		t.Fatalf("%v\nlast output:\n%s", err, out)
	}
	t.Logf("kubectl top node:\n%s", out)
}

// kraftletPod is a bare pod with one container, app, bound to the kraftlet node node.
func kraftletPod(ns, name, node string) *corev1.Pod {
	p := kwokPod(ns, name, node, map[string]string{"app": "relays"}, corev1.Container{Name: "app", Image: "unikraft.org/nginx:latest"})
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
		Key: env.KraftletTaintKey, Operator: corev1.TolerationOpEqual, Value: env.KraftletTaintValue, Effect: corev1.TaintEffectNoSchedule,
	})
	return p
}

// setContainerID writes id as the container ID of the first container of the pod, as kraftlet records an
// instance's UUID.
func setContainerID(ctx context.Context, t *testing.T, ns, name, id string) {
	t.Helper()
	pods := suite.cluster.Client().CoreV1().Pods(ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", name)
	}
	p.Status.ContainerStatuses[0].ContainerID = id
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(t, err)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
