package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

func hostPort(port int) string { return net.JoinHostPort(loopback, strconv.Itoa(port)) }

func (c *Cluster) bin(name string) string { return c.opts.binPath(name) }

func (c *Cluster) startEtcd(ctx context.Context) error {
	clientURL := "http://" + hostPort(c.ports.etcdClient)
	peerURL := "http://" + hostPort(c.ports.etcdPeer)
	args := []string{
		"--name=etcd",
		"--data-dir=" + filepath.Join(c.workDir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=etcd=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	p, err := c.startProcess(tierEtcd, "etcd", nil, c.bin(EtcdBinary), append(args, c.opts.EtcdArgs...)...)
	if err != nil {
		return err
	}
	return waitUntil(ctx, "etcd to be healthy", []*Process{p}, func(ctx context.Context) error {
		return c.checkHealth(ctx, clientURL+"/health", `"health":"true"`)
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	args := []string{
		"--etcd-servers=http://" + hostPort(c.ports.etcdClient),
		"--bind-address=" + loopback,
		"--advertise-address=" + loopback,
		"--secure-port=" + strconv.Itoa(c.ports.apiServer),
		"--tls-cert-file=" + c.pki.file("apiserver.crt"),
		"--tls-private-key-file=" + c.pki.file("apiserver.key"),
		"--client-ca-file=" + c.pki.file("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki.file("sa.key"),
		"--service-account-signing-key-file=" + c.pki.file("sa.key"),
		"--service-cluster-ip-range=" + c.opts.ServiceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--enable-aggregator-routing=false",
		"--requestheader-client-ca-file=" + c.pki.file("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--proxy-client-cert-file=" + c.pki.file("front-proxy-client.crt"),
		"--proxy-client-key-file=" + c.pki.file("front-proxy-client.key"),
		"--max-requests-inflight=" + strconv.Itoa(c.opts.MaxRequestsInflight),
		"--max-mutating-requests-inflight=" + strconv.Itoa(c.opts.MaxMutatingRequestsInflight),
		"--profiling=false",
		// Nothing runs the node lifecycle controller, which would lift the
		// not-ready taint this plugin puts on every new node.
		"--disable-admission-plugins=TaintNodesByCondition",
	}
	p, err := c.startProcess(tierAPIServer, "kube-apiserver", nil, c.bin(APIServerBinary),
		append(args, c.opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	watch := []*Process{p, c.process("etcd")}
	if err := waitUntil(ctx, "kube-apiserver /readyz", watch, func(ctx context.Context) error {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Raw()
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	}); err != nil {
		return err
	}
	return waitUntil(ctx, "system namespaces and the authentication ConfigMap", watch, func(ctx context.Context) error {
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
	"horizontalpodautoscaling",
	"deployment",
	"replicaset",
	"statefulset",
	"serviceaccount",
	"serviceaccount-token",
	"root-ca-cert-publisher",
	"garbagecollector",
	"namespace",
	"podgc",
	"clusterrole-aggregation",
}

func (c *Cluster) startControllers(ctx context.Context) error {
	type started struct {
		proc  *Process
		what  string
		check func(context.Context) error
	}
	var all []started

	kcm, err := c.startControllerManager()
	if err != nil {
		return err
	}
	all = append(all, started{kcm, "kube-controller-manager /healthz", func(ctx context.Context) error {
		return c.checkHealth(ctx, "https://"+hostPort(c.ports.controllerManager)+"/healthz", "ok")
	}})

	if !c.opts.WithoutScheduler {
		sched, err := c.startScheduler()
		if err != nil {
			return err
		}
		all = append(all, started{sched, "kube-scheduler /healthz", func(ctx context.Context) error {
			return c.checkHealth(ctx, "https://"+hostPort(c.ports.scheduler)+"/healthz", "ok")
		}})
	}

	kwok, err := c.startKwok()
	if err != nil {
		return err
	}
	all = append(all, started{kwok, "kwok /healthz", func(ctx context.Context) error {
		return c.checkHealth(ctx, "http://"+hostPort(c.ports.kwok)+"/healthz", "")
	}})

	core := []*Process{c.process("etcd"), c.process("kube-apiserver")}
	for _, s := range all {
		if err := waitUntil(ctx, s.what, append([]*Process{s.proc}, core...), s.check); err != nil {
			return err
		}
	}
	return waitUntil(ctx, "the default ServiceAccount", append(core, kcm), func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startControllerManager() (*Process, error) {
	o := c.opts
	kubeconfig := c.kubeconfigPath("kube-controller-manager")
	args := append(c.servingArgs(kubeconfig, c.ports.controllerManager, "controller-manager-serving"),
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.pki.file("sa.key"),
		"--root-ca-file="+c.pki.file("ca.crt"),
		"--controllers="+strings.Join(controllers, ","),
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--horizontal-pod-autoscaler-sync-period="+o.HPASyncPeriod.String(),
		"--horizontal-pod-autoscaler-downscale-stabilization="+o.HPADownscaleStabilization.String(),
		"--horizontal-pod-autoscaler-cpu-initialization-period="+o.HPACPUInitializationPeriod.String(),
		"--horizontal-pod-autoscaler-initial-readiness-delay="+o.HPAInitialReadinessDelay.String(),
	)
	return c.startProcess(tierController, "kube-controller-manager", nil, c.bin(ControllerManagerBinary),
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
	args := append(c.servingArgs(kubeconfig, c.ports.scheduler, "scheduler-serving"), "--config="+configPath)
	return c.startProcess(tierController, "kube-scheduler", nil, c.bin(SchedulerBinary),
		append(args, c.opts.SchedulerArgs...)...)
}

func (c *Cluster) startKwok() (*Process, error) {
	configPath := filepath.Join(c.workDir, "kwok.yaml")
	config := kwokConfig(c.opts.PodCIDR, hostPort(c.ports.kwok))
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("write kwok config: %w", err)
	}
	// kwok also reads ~/.kwok/kwok.yaml when it exists; a private HOME keeps
	// a user's file out of the test cluster.
	home := filepath.Join(c.workDir, "kwok-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("create kwok home: %w", err)
	}
	env := append(os.Environ(), "HOME="+home)
	args := []string{
		"--kubeconfig=" + c.kubeconfigPath("kwok"),
		"--config=" + configPath,
	}
	return c.startProcess(tierController, "kwok", env, c.bin(KwokBinary), append(args, c.opts.KwokArgs...)...)
}

// servingArgs are the flags kube-controller-manager and kube-scheduler
// share: delegated authentication and authorization through kubeconfig,
// and a secure port on loopback with the serving pair named pair.
func (c *Cluster) servingArgs(kubeconfig string, port int, pair string) []string {
	return []string{
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.pki.file(pair+".crt"),
		"--tls-private-key-file=" + c.pki.file(pair+".key"),
		"--profiling=false",
	}
}

// process returns the cluster's process with the given name, or nil.
func (c *Cluster) process(name string) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// checkHealth GETs a component's health endpoint, trusting the cluster CA
// only, and wants 200 and a body that holds want.
func (c *Cluster) checkHealth(ctx context.Context, url, want string) error {
	client, err := rest.HTTPClientFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.ca.CertPEM()}, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err == nil && (resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want)) {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return err
}
