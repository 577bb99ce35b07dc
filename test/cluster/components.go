package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

const (
	// serviceClusterIPRange is a loopback range: nothing proxies Services
	// here, and a component that dials a ClusterIP by mistake stays on the
	// machine.
	serviceClusterIPRange = "127.96.0.0/16"
	// podCIDR is the range kwok takes pod IPs from, a loopback range for the
	// same reason.
	podCIDR = "127.16.0.0/16"
	// resourceMetricsPodCIDR is StartResourceMetricsKwok's.
	resourceMetricsPodCIDR = "127.17.0.0/16"
)

func (c *Cluster) startEtcd(ctx context.Context) error {
	clientURL := "http://" + hostPort(c.ports["etcd"])
	peerURL := "http://" + hostPort(c.ports["etcd-peer"])
	p, err := c.StartProcessWithEnv("etcd", nil, c.BinaryPath(EtcdBinary),
		"--name=etcd", "--data-dir="+filepath.Join(c.workDir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=etcd="+peerURL, "--initial-cluster-state=new", "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, p, clientURL+"/health")
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	file := c.pki.file
	p, err := c.StartProcessWithEnv("kube-apiserver", nil, c.BinaryPath(APIServerBinary),
		"--etcd-servers=http://"+hostPort(c.ports["etcd"]),
		"--bind-address="+loopback, "--advertise-address="+loopback, "--secure-port="+strconv.Itoa(c.ports["kube-apiserver"]),
		"--tls-cert-file="+file("apiserver.crt"), "--tls-private-key-file="+file("apiserver.key"),
		"--client-ca-file="+file("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+file("sa.key"), "--service-account-signing-key-file="+file("sa.key"),
		"--service-cluster-ip-range="+serviceClusterIPRange, "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--endpoint-reconciler-type=none", "--enable-aggregator-routing=false",
		"--requestheader-client-ca-file="+file("front-proxy-ca.crt"), "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-", "--requestheader-uid-headers=X-Remote-Uid",
		"--proxy-client-cert-file="+file("front-proxy-client.crt"), "--proxy-client-key-file="+file("front-proxy-client.key"),
		"--kubelet-client-certificate="+file("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+file("apiserver-kubelet-client.key"),
		"--max-requests-inflight=3000", "--max-mutating-requests-inflight=1000", "--profiling=false",
		// Nothing runs the node lifecycle controller, which would lift the
		// not-ready taint this plugin puts on every new node.
		"--disable-admission-plugins=TaintNodesByCondition",
		// A namespace annotated with PodNodeSelectorAnnotation keeps its pods
		// on the nodes it names: manifests applied as published (the
		// LeaderWorkerSet project's examples) then run on the real node.
		"--enable-admission-plugins=PodNodeSelector",
	)
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, p, c.APIServerURL()+"/readyz"); err != nil {
		return err
	}
	return Poll(ctx, "system namespaces and the authentication ConfigMap", c.coreProcesses(), func(ctx context.Context) error {
		for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, "kube-node-lease"} {
			if _, err := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		_, err := c.client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		return err
	})
}

// controllers are the kube-controller-manager controllers that run: the
// workload controllers the tests use and what they depend on (service
// accounts and their tokens, the root CA ConfigMap, garbage and namespace
// collection, RBAC aggregation for the metrics reader roles).
var controllers = []string{
	"horizontalpodautoscaling", "deployment", "replicaset", "statefulset", "serviceaccount", "serviceaccount-token",
	"root-ca-cert-publisher", "garbagecollector", "namespace", "podgc", "clusterrole-aggregation",
}

// startControllers starts kube-controller-manager, kube-scheduler and kwok,
// and waits until each is healthy and the default ServiceAccount exists.
func (c *Cluster) startControllers(ctx context.Context) error {
	health := map[*Process]string{}
	kcm, err := c.startControllerManager()
	if err != nil {
		return err
	}
	health[kcm] = "https://" + hostPort(c.ports["kube-controller-manager"]) + "/healthz"
	if !c.opts.WithoutScheduler {
		sched, err := c.startScheduler()
		if err != nil {
			return err
		}
		health[sched] = "https://" + hostPort(c.ports["kube-scheduler"]) + "/healthz"
	}
	kwok, err := c.startKwok(ctx)
	if err != nil {
		return err
	}
	health[kwok] = "http://" + hostPort(c.ports["kwok"]) + "/healthz"
	for p, url := range health {
		if err := c.waitHealthy(ctx, p, url); err != nil {
			return err
		}
	}
	return Poll(ctx, "the default ServiceAccount", c.coreProcesses(kcm.name), func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startControllerManager() (*Process, error) {
	o := c.opts
	kubeconfig := c.kubeconfigPath("kube-controller-manager")
	args := append(c.servingArgs(kubeconfig, c.ports["kube-controller-manager"], "controller-manager-serving"),
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.pki.file("sa.key"), "--root-ca-file="+c.pki.file("ca.crt"),
		"--controllers="+strings.Join(controllers, ","), "--kube-api-qps=200", "--kube-api-burst=400",
		"--horizontal-pod-autoscaler-sync-period="+o.HPASyncPeriod.String(),
		"--horizontal-pod-autoscaler-downscale-stabilization="+o.HPADownscaleStabilization.String(),
		"--horizontal-pod-autoscaler-cpu-initialization-period="+o.HPACPUInitializationPeriod.String(),
		"--horizontal-pod-autoscaler-initial-readiness-delay="+o.HPAInitialReadinessDelay.String(),
	)
	return c.StartProcessWithEnv("kube-controller-manager", nil, c.BinaryPath(ControllerManagerBinary),
		append(args, o.ControllerManagerArgs...)...)
}

func (c *Cluster) startScheduler() (*Process, error) {
	kubeconfig := c.kubeconfigPath("kube-scheduler")
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
`, kubeconfig)
	configPath := filepath.Join(c.workDir, "kube-scheduler.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("write scheduler config: %w", err)
	}
	args := append(c.servingArgs(kubeconfig, c.ports["kube-scheduler"], "scheduler-serving"), "--config="+configPath)
	return c.StartProcessWithEnv("kube-scheduler", nil, c.BinaryPath(SchedulerBinary), args...)
}

func (c *Cluster) startKwok(ctx context.Context) (*Process, error) {
	src, err := SourceDir(ctx, c.BinaryPath(KwokBinary))
	if err != nil {
		return nil, err
	}
	return c.runKwok("kwok", src, podCIDR, KwokNodeAnnotationValue, hostPort(c.ports["kwok"]), nil)
}

// StartResourceMetricsKwok starts another kwok, name, that manages the
// nodes annotated KwokNodeAnnotation=nodes as the cluster's own kwok manages
// NodeObject's, and serves at addr, over TLS with a certificate of the
// cluster CA, each node's kubelet /metrics/resource as kwok simulates it:
// at /metrics/nodes/<node>/metrics/resource, kwok's own Metric
// (kustomize/metrics/resource in its source), with each pod's usage its
// kwok.x-k8s.io/usage-cpu and usage-memory annotations (kwok's
// kustomize/metrics/usage). kwok's documentation has such a node carry
// metrics.k8s.io/resource-metrics-path for metrics-server to read it there.
// It returns once kwok answers /healthz.
func (c *Cluster) StartResourceMetricsKwok(ctx context.Context, name, nodes, addr string) (*Process, error) {
	src, err := SourceDir(ctx, c.BinaryPath(KwokBinary))
	if err != nil {
		return nil, err
	}
	var docs []string
	for _, f := range []string{"metrics/resource/metrics-resource.yaml", "metrics/usage/usage-from-annotation.yaml"} {
		data, err := os.ReadFile(filepath.Join(src, "kustomize", filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("kwok's metrics configuration: %w", err)
		}
		docs = append(docs, strings.TrimRight(string(data), "\n")+"\n")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := c.IssueServingCert(name, host)
	if err != nil {
		return nil, err
	}
	p, err := c.runKwok(name, src, resourceMetricsPodCIDR, nodes, addr, docs, "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
	if err != nil {
		return nil, err
	}
	return p, c.waitHealthy(ctx, p, "https://"+addr+"/healthz")
}

// runKwok starts kwok as the process name with its own stages (from its
// source, src) and docs, more of its configuration, managing the nodes
// annotated KwokNodeAnnotation=nodes, taking pod IPs from cidr and serving at
// addr.
func (c *Cluster) runKwok(name, src, cidr, nodes, addr string, docs []string, args ...string) (*Process, error) {
	stages, err := kwokStages(src)
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(c.workDir, name+".yaml")
	if err := os.WriteFile(configPath, []byte(kwokConfig(cidr, addr, nodes, append(stages, docs...))), 0o644); err != nil {
		return nil, fmt.Errorf("write %s config: %w", name, err)
	}
	// kwok also reads ~/.kwok/kwok.yaml when it exists; a private HOME keeps
	// a user's file out of the test cluster.
	home := filepath.Join(c.workDir, name+"-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("create %s home: %w", name, err)
	}
	return c.StartProcessWithEnv(name, append(os.Environ(), "HOME="+home), c.BinaryPath(KwokBinary),
		append([]string{"--kubeconfig=" + c.kubeconfigPath("kwok"), "--config=" + configPath}, args...)...)
}

// servingArgs are the flags kube-controller-manager and kube-scheduler
// share: delegated authentication and authorization through kubeconfig,
// and a secure port on loopback with the serving pair named pair.
func (c *Cluster) servingArgs(kubeconfig string, port int, pair string) []string {
	return []string{"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + loopback, "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.pki.file(pair+".crt"), "--tls-private-key-file=" + c.pki.file(pair+".key"), "--profiling=false"}
}

// waitHealthy waits until the health endpoint url of p answers 200,
// trusting the cluster CA only, and fails early if p, etcd or
// kube-apiserver exits.
func (c *Cluster) waitHealthy(ctx context.Context, p *Process, url string) error {
	client, err := rest.HTTPClientFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.ca.CertPEM()}, Timeout: checkTimeout})
	if err != nil {
		return err
	}
	return Poll(ctx, p.name+" "+url, append(c.coreProcesses(), p), func(ctx context.Context) error {
		return CheckOK(ctx, client, url)
	})
}

// CheckOK GETs url with client and returns an error unless it answers 200.
func CheckOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// KwokNodeAnnotation marks the nodes kwok manages. NodeObject sets it; a
// node made some other way needs it too, and NodeObject's addresses,
// daemon endpoints and resources, which kwok keeps.
const (
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"
)

// kwokConfig returns kwok's --config file: the controller options, managing
// the nodes annotated KwokNodeAnnotation=nodes, followed by docs: the Stages
// that move nodes and pods through their lifecycle, and any other
// configuration. kwok's server (its health endpoint, and metrics where docs
// configure them) listens on serverAddr.
func kwokConfig(podCIDR, serverAddr, nodes string, docs []string) string {
	options := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: %q
  nodeIP: "127.0.0.1"
  serverAddress: %q
  manageAllNodes: false
  manageNodesWithAnnotationSelector: "%s=%s"
  nodeLeaseDurationSeconds: 120
  nodeLeaseParallelism: 16
  nodePlayStageParallelism: 16
  podPlayStageParallelism: 32
  podsOnNodeSyncParallelism: 8
  enableDebuggingHandlers: false
  enableProfilingHandler: false
`, podCIDR, serverAddr, KwokNodeAnnotation, nodes)
	return strings.Join(append([]string{options}, docs...), "---\n")
}

// kwokStages are kwok's own stages, from the source of its release in dir
// (SourceDir), that make a node Ready and a scheduled pod Running and Ready
// at once, then podDeleteStage. kwok's node stage keeps the addresses,
// daemon endpoints and resources of a NodeObject and reports kwok's version
// as the kubelet's. No stage refreshes a node's conditions later: kwok renews
// the node's lease, and no node lifecycle controller runs to read heartbeats.
func kwokStages(dir string) ([]string, error) {
	var stages []string
	for _, name := range []string{"node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, "kustomize", "stage", filepath.FromSlash(name)))
		if err != nil {
			return nil, fmt.Errorf("kwok stage: %w", err)
		}
		stages = append(stages, strings.TrimRight(string(data), "\n")+"\n")
	}
	return append(stages, podDeleteStage), nil
}

// podDeleteStage plays the kubelet's part in graceful deletion: a pod marked
// for deletion loses its finalizers and is removed. (kwok's own pod-delete
// stage leaves the finalizers, and with them the pod.)
const podDeleteStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
  next:
    finalizers:
      empty: true
    delete: true
`
