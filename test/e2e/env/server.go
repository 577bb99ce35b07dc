package env

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// MetricsAPIServices are the APIServices manifests/base registers.
var MetricsAPIServices = []string{"v1beta1.metrics.k8s.io", "v1.metrics.k8s.io"}

// ServerConfig configures DeployServer; zero fields take the defaults given.
type ServerConfig struct {
	ManifestsDir  string // the kustomization to deploy; <repo>/manifests/base
	BinDir        string // holds group-metrics-server; BinDir()
	KubeletCAFile string // verifies the fake kubelets' serving certificates; required
	// MetricResolution (default 5s) and KubeletRequestTimeout (default 3s,
	// below the resolution) replace the manifests' flags.
	MetricResolution, KubeletRequestTimeout time.Duration
	// ExtraArgs are appended last, so they override; ControllerArgs are
	// appended to the certificate controller's.
	ExtraArgs, ControllerArgs []string
	// ForceConflicts applies over fields another manager owns (kubectl
	// apply --server-side --force-conflicts), as when replacing
	// metrics-server's objects.
	ForceConflicts bool
	ProcessName    string // names the process and its log; group-metrics-server
}

// Server is group-metrics-server deployed by DeployServer.
type Server struct {
	Process *cluster.Process
	Port    int      // the secure port on 127.0.0.1
	Args    []string // the command line
	// ServiceHost is <service>.<namespace>.svc, the name the aggregator
	// verifies the serving certificate against.
	ServiceHost               string
	CABundle                  []byte // the caBundle the server wrote into its APIServices
	Namespace, ServiceAccount string // those of the Deployment
	// APIServices are the APIServices of the manifests, all pointing at this
	// server: MetricsAPIServices for manifests/base, and the
	// custom.metrics.k8s.io ones too for manifests/custom-metrics.
	APIServices []string
	// Controller is the certificate controller of the manifests while it
	// runs; nil when the manifests have none.
	Controller *cluster.Process

	cluster        *cluster.Cluster
	name, binDir   string
	registration   []*unstructured.Unstructured // the Service and APIServices as applied, for Register
	controllerArgs []string
	controllerSA   string
	controllerRuns int
	stopVolumes    context.CancelFunc
}

const (
	serverDeployment, serverContainer         = "group-metrics-server", "group-metrics-server"
	controllerDeployment, controllerContainer = "group-metrics-server-cert-controller", "cert-controller"
)

// DeployServer deploys group-metrics-server from the manifests. Every object
// but the Deployments is applied unchanged except the Service and the
// APIServices' port; each Deployment's container runs as a local process
// with the Deployment's own args, plus the flags a process outside the
// cluster needs, and the server's Secret volumes are kept in local
// directories as the kubelet would (SecretVolume). It returns once every
// APIService of the manifests is Available, kube-apiserver serves it, and
// its caBundle verifies the server's certificate for the Service's name.
//
// The Service and APIServices are shared by every server deployed into one
// cluster: the latest one deployed serves them, and its certificate
// controller runs, until Register or Undeploy points them elsewhere.
func DeployServer(ctx context.Context, c *cluster.Cluster, cfg ServerConfig) (*Server, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	objs, err := Render(ctx, c, cfg.ManifestsDir)
	if err != nil {
		return nil, err
	}
	s, deploy, err := newServer(c, cfg, objs)
	if err != nil {
		return nil, err
	}
	var flags []string
	if cfg.ForceConflicts {
		flags = []string{"--force-conflicts"}
	}
	if s.Port, s.registration, err = applyOnLoopback(ctx, c, cfg.ProcessName, objs, flags...); err != nil {
		return nil, err
	}
	// The APIServices name the server's port (above), and so must one the
	// controller creates again; its metrics port is on loopback and picked
	// by the kernel, so that suites on one machine never collide on the
	// manifests' :8080.
	return s, s.start(ctx, objs, deploy, cfg, "--service-port="+strconv.Itoa(s.Port), "--metrics-bind-address=127.0.0.1:0")
}

// newServer is the server of the Deployment and Service of objs, with the
// APIServices of objs, before it has a port and starts; deploy is its
// Deployment.
func newServer(c *cluster.Cluster, cfg ServerConfig, objs []*unstructured.Unstructured) (s *Server, deploy *unstructured.Unstructured, err error) {
	deploy, err = find(objs, "Deployment", serverDeployment)
	if err != nil {
		return nil, nil, err
	}
	svc, err := find(objs, "Service", "")
	if err != nil {
		return nil, nil, err
	}
	s = &Server{ServiceHost: svc.GetName() + "." + svc.GetNamespace() + ".svc", Namespace: deploy.GetNamespace(),
		cluster: c, name: cfg.ProcessName, binDir: cfg.BinDir}
	for _, o := range objs {
		if o.GetKind() == "APIService" {
			s.APIServices = append(s.APIServices, o.GetName())
		}
	}
	return s, deploy, nil
}

// start runs the certificate controller of objs, if they have one, with
// its Deployment's args, then ctrlArgs and cfg.ControllerArgs, and the
// server with the args of deploy's container plus the flags a process on
// the host needs (hostArgs), its Secret volumes kept in local directories;
// it waits until the server's APIServices are Available.
func (s *Server) start(ctx context.Context, objs []*unstructured.Unstructured, deploy *unstructured.Unstructured, cfg ServerConfig, ctrlArgs ...string) error {
	if ctrl, _ := find(objs, "Deployment", controllerDeployment); ctrl != nil {
		ctr, spec, err := container(ctrl, controllerContainer)
		if err != nil {
			return err
		}
		s.controllerArgs = append(append(ctr.Args, ctrlArgs...), cfg.ControllerArgs...)
		s.controllerSA = cmp.Or(spec.ServiceAccountName, "default")
		if err := s.ensureController(ctx); err != nil {
			return err
		}
	}
	ctr, spec, err := container(deploy, serverContainer)
	if err != nil {
		return err
	}
	if err := s.mountVolumes(ctx, ctr, spec.Volumes); err != nil {
		return err
	}
	s.ServiceAccount = cmp.Or(spec.ServiceAccountName, "default")
	kubeconfig, err := s.cluster.ServiceAccountKubeconfig(ctx, s.Namespace, s.ServiceAccount)
	if err != nil {
		return err
	}
	s.Args = hostArgs(ctr.Args, kubeconfig, s.Port, cfg)
	if s.Process, err = s.StartAgain(cfg.ProcessName); err != nil {
		return err
	}
	return s.waitAvailable(ctx)
}

func (cfg *ServerConfig) complete() error {
	if cfg.KubeletCAFile == "" {
		return errors.New("ServerConfig.KubeletCAFile is required")
	}
	var err error
	if cfg.ManifestsDir == "" {
		var root string
		root, err = RepoRoot()
		cfg.ManifestsDir = filepath.Join(root, "manifests", "base")
	}
	if cfg.BinDir == "" && err == nil {
		cfg.BinDir, err = BinDir()
	}
	if err != nil {
		return err
	}
	cfg.MetricResolution = cmp.Or(cfg.MetricResolution, 5*time.Second)
	cfg.KubeletRequestTimeout = cmp.Or(cfg.KubeletRequestTimeout, 3*time.Second)
	cfg.ProcessName = cmp.Or(cfg.ProcessName, ServerBinary)
	return CheckBinaries(cfg.BinDir, ServerBinary)
}

// applyOnLoopback applies objs but the Deployments under name (Apply, with
// flags), the Service exposed on loopback and the APIServices on a free port
// (the aggregator dials an ExternalName Service's host on the APIService's
// port). It returns the port and the Service and APIServices as applied.
func applyOnLoopback(ctx context.Context, c *cluster.Cluster, name string, objs []*unstructured.Unstructured, flags ...string) (port int, registration []*unstructured.Unstructured, err error) {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return 0, nil, err
	}
	var apply []*unstructured.Unstructured
	for _, o := range objs {
		o = o.DeepCopy()
		switch o.GetKind() {
		case "Deployment":
			continue
		case "Service":
			err = exposeOnLoopback(o, ports[0])
		case "APIService":
			err = unstructured.SetNestedField(o.Object, int64(ports[0]), "spec", "service", "port")
		}
		if err != nil {
			return 0, nil, err
		}
		if o.GetKind() == "Service" || o.GetKind() == "APIService" {
			registration = append(registration, o)
		}
		apply = append(apply, o)
	}
	return ports[0], registration, Apply(ctx, c, name, apply, flags...)
}

// exposeOnLoopback turns the Service into one kube-apiserver can follow to a
// process on 127.0.0.1: type ExternalName with host localhost (Endpoints and
// EndpointSlices may not name loopback addresses), on the server's port
// (loopback forces a port nobody else holds; 443 needs privileges).
func exposeOnLoopback(svc *unstructured.Unstructured, port int) error {
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 {
		return fmt.Errorf("service %s: want exactly one port, got %d", svc.GetName(), len(ports))
	}
	p, _ := ports[0].(map[string]any)
	p["port"], p["targetPort"] = int64(port), int64(port)
	return unstructured.SetNestedMap(svc.Object, map[string]any{"type": "ExternalName", "externalName": "localhost", "ports": ports}, "spec")
}

// waitAvailable waits until every APIService of the server carries a
// caBundle that verifies the server's certificate for ServiceHost, is
// Available, and kube-apiserver serves it.
func (s *Server) waitAvailable(ctx context.Context) error {
	watch := []*cluster.Process{s.Process}
	for _, name := range s.APIServices {
		err := cluster.Poll(ctx, "APIService "+name+" to carry a caBundle that verifies the server", watch, func(ctx context.Context) error {
			bundle, err := CABundle(ctx, s.cluster, name)
			if err == nil && len(bundle) == 0 {
				err = errors.New("no caBundle yet")
			}
			if err == nil {
				if err = s.verifyServing(ctx, bundle); err == nil {
					s.CABundle = bundle
				}
			}
			return err
		})
		if err == nil {
			err = s.cluster.WaitForAPIServiceAvailable(ctx, name)
		}
		if err == nil {
			err = s.waitProxied(ctx, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// proxyLag bounds how long after an APIService is Available kube-apiserver
// may still refuse to proxy it: far above the moment its informer takes.
const proxyLag = 30 * time.Second

// waitProxied waits until kube-apiserver answers the group-version of the
// APIService name. The aggregator follows the Available condition through an
// informer and answers 503 until it has seen it, so Available alone does not
// mean that the next request through kube-apiserver is served.
func (s *Server) waitProxied(ctx context.Context, name string) error {
	obj, err := s.cluster.APIServices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
	version, _, _ := unstructured.NestedString(obj.Object, "spec", "version")
	ctx, cancel := context.WithTimeout(ctx, proxyLag)
	defer cancel()
	rc := s.cluster.Client().Discovery().RESTClient()
	return cluster.Poll(ctx, "kube-apiserver to serve APIService "+name, []*cluster.Process{s.Process}, func(ctx context.Context) error {
		return rc.Get().AbsPath("/apis", group, version).Do(ctx).Error()
	})
}

func (s *Server) verifyServing(ctx context.Context, caBundle []byte) error {
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: caBundle, ServerName: s.ServiceHost}})
	if err != nil {
		return err
	}
	conn, err := (&tls.Dialer{Config: tlsCfg}).DialContext(ctx, "tcp", s.Address())
	if err != nil {
		return fmt.Errorf("TLS to %s as %s: %w", s.Address(), s.ServiceHost, err)
	}
	return conn.Close()
}

// Address returns 127.0.0.1:<port>.
func (s *Server) Address() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// RESTConfig returns a configuration that reaches the server directly (not
// through the aggregator) as the cluster admin, verifying its certificate
// against the caBundle for ServiceHost.
func (s *Server) RESTConfig() *rest.Config {
	return adminConfig(s.cluster, s.Address(), s.ServiceHost, s.CABundle)
}

// adminConfig reaches addr directly with the cluster admin's credentials
// and client settings, verifying its certificate against ca for serverName
// ("": addr's host).
func adminConfig(c *cluster.Cluster, addr, serverName string, ca []byte) *rest.Config {
	cfg := c.RESTConfig()
	cfg.Host, cfg.ServerName, cfg.CAData, cfg.Timeout = "https://"+addr, serverName, ca, 30*time.Second
	return cfg
}

// HTTPClient returns a client for RESTConfig.
func (s *Server) HTTPClient() (*http.Client, error) { return rest.HTTPClientFor(s.RESTConfig()) }

// hostArgs are the manifest's args of the server plus what a process on the
// host rather than a pod needs: no in-cluster config, no pod network, and
// kubelets signed by the fleet's CA; then cfg.ExtraArgs.
func hostArgs(manifestArgs []string, kubeconfig string, port int, cfg ServerConfig) []string {
	args := append(append([]string{}, manifestArgs...),
		"--kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--kubelet-certificate-authority="+cfg.KubeletCAFile,
		"--metric-resolution="+cfg.MetricResolution.String(),
		"--kubelet-request-timeout="+cfg.KubeletRequestTimeout.String(),
	)
	return append(args, cfg.ExtraArgs...)
}

// PermitPortSharing is the server flag (from k8s.io/apiserver's secure
// serving options) that binds the secure port with SO_REUSEPORT. Deploy a
// server with it in ExtraArgs to run replicas of it on the same address and
// port: the aggregator dials the ExternalName Service's host, localhost,
// which resolves to 127.0.0.1 only, and the kernel spreads the new
// connections over every replica listening there.
const PermitPortSharing = "--permit-port-sharing"

// StartAgain starts the server's command line (Args) once more as a new
// process named name, with the same address, port, flags and serving
// certificate Secret. With PermitPortSharing in Args it runs next to the
// current process, as a second replica; otherwise the current process must
// have exited first. It does not wait for the new process to be ready.
func (s *Server) StartAgain(name string) (*cluster.Process, error) {
	return s.cluster.StartProcess(name, filepath.Join(s.binDir, ServerBinary), s.Args...)
}

// CABundle returns the caBundle of the APIService name.
func CABundle(ctx context.Context, c *cluster.Cluster, name string) ([]byte, error) {
	obj, err := c.APIServices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	b64, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle")
	return base64.StdEncoding.DecodeString(b64)
}

// Get fetches url with client and returns the status code and body.
func Get(ctx context.Context, client *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, string(body), err
}
