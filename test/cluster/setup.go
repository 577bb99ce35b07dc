package cluster

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

const loopback = "127.0.0.1"

func hostPort(port int) string { return net.JoinHostPort(loopback, strconv.Itoa(port)) }

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago, for servers started next to the cluster. All listeners are held until
// every port is picked, so the ports differ.
func FreePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func (c *Cluster) kubeconfigPath(name string) string {
	return filepath.Join(c.workDir, "kubeconfigs", name+".kubeconfig")
}

// writeKubeconfigs writes a kubeconfig for each client identity and builds
// the admin client.
func (c *Cluster) writeKubeconfigs() error {
	for name, leaf := range clientIdentities {
		certPEM, keyPEM, err := c.pki.ca.Issue(time.Now(), leaf)
		if err != nil {
			return err
		}
		user := &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
		if err := c.writeKubeconfig(c.kubeconfigPath(name), name, user); err != nil {
			return err
		}
	}
	c.adminKubeconfig = c.kubeconfigPath("admin")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.adminKubeconfig)
	if err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	cfg.QPS = 500
	cfg.Burst = 1000
	c.restConfig = cfg
	if c.client, err = kubernetes.NewForConfig(rest.CopyConfig(cfg)); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if c.dynamic, err = dynamic.NewForConfig(rest.CopyConfig(cfg)); err != nil {
		return fmt.Errorf("admin dynamic client: %w", err)
	}
	return nil
}

func (c *Cluster) writeKubeconfig(path, user string, auth *clientcmdapi.AuthInfo) error {
	const clusterName = "gms-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   c.APIServerURL(),
		CertificateAuthorityData: c.pki.ca.CertPEM(),
	}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = user
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

const (
	// PollInterval is how often Poll checks.
	PollInterval = 250 * time.Millisecond
	checkTimeout = 10 * time.Second
)

// Poll is PollUntil every PollInterval, each call bounded by ten seconds.
func Poll(ctx context.Context, what string, watch []*Process, check func(context.Context) error) error {
	return PollUntil(ctx, what, PollInterval, checkTimeout, watch, check)
}

// PollUntil calls check every interval, each call bounded by callTimeout,
// until it returns nil. It fails early when one of the watched processes
// exits, and otherwise when ctx is done, reporting the last error from check.
func PollUntil(ctx context.Context, what string, interval, callTimeout time.Duration, watch []*Process, check func(context.Context) error) error {
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		checkCtx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if lastErr = check(checkCtx); lastErr == nil {
			return true, nil
		}
		for _, p := range watch {
			if p != nil && p.exited() {
				return false, p.exitedError()
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w (last error: %w)", what, err, lastErr)
	}
	return nil
}

// SourceDir returns ModuleDir of the main module the binary at path was built
// from (its build information), so that the files shipped with a tool
// (kwok's stages, metrics-server's manifests) are those of the release that
// runs.
func SourceDir(ctx context.Context, path string) (string, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("build information of %s: %w", path, err)
	}
	return ModuleDir(ctx, info.Main.Path+"@"+info.Main.Version)
}

// ModuleDir returns the module cache directory of module ("path@version"),
// downloading it if needed. It runs the go command.
func ModuleDir(ctx context.Context, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	var m struct{ Dir string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Dir == "" {
		err = errors.New("no directory")
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	return m.Dir, nil
}

// certValidity is long enough for any test run and short enough that a
// forgotten work directory does not hold credentials that matter.
const certValidity = 7 * 24 * time.Hour

// clusterPKI holds the control plane's certificates and keys in dir: ca.crt
// and front-proxy-ca.crt (their keys stay in memory), <name>.crt and .key
// for the serving leaves and the front proxy's client, and sa.key, which
// signs service-account tokens. clientIdentities live in kubeconfigs only.
type clusterPKI struct {
	dir              string
	ca, frontProxyCA *pki.CA
}

// clientIdentities are the users the control plane's own kubeconfigs act as,
// by kubeconfig name.
var clientIdentities = map[string]pki.Leaf{
	"admin":                   {CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Client: true},
	"kube-controller-manager": {CommonName: "system:kube-controller-manager", Client: true},
	"kube-scheduler":          {CommonName: "system:kube-scheduler", Client: true},
	"kwok":                    {CommonName: "kwok-controller", Organizations: []string{"system:masters"}, Client: true},
}

func newClusterPKI(dir string) (*clusterPKI, error) {
	now := time.Now()
	p := &clusterPKI{dir: dir}
	var err error
	if p.ca, err = pki.NewCA("ca", now, certValidity); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = pki.NewCA("front-proxy-ca", now, certValidity); err != nil {
		return nil, err
	}
	for name, ca := range map[string]*pki.CA{"ca": p.ca, "front-proxy-ca": p.frontProxyCA} {
		if err := cert.WriteCert(p.file(name+".crt"), ca.CertPEM()); err != nil {
			return nil, err
		}
	}
	local := []string{loopback, "localhost"}
	serving := append(local, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	leaves := map[string]pki.Leaf{
		"apiserver":                  {CommonName: "kube-apiserver", Hosts: serving, Server: true},
		"controller-manager-serving": {CommonName: "kube-controller-manager", Hosts: local, Server: true},
		"scheduler-serving":          {CommonName: "kube-scheduler", Hosts: local, Server: true},
		// kube-apiserver's client to kubelets (exec, logs); a real node's
		// kubelet authorizes its user (node.go, ensureKubeletAPIAdmin).
		"apiserver-kubelet-client": {CommonName: apiserverKubeletClient, Client: true},
	}
	for name, l := range leaves {
		if _, _, err := p.ca.IssueFiles(now, dir, name, l); err != nil {
			return nil, err
		}
	}
	if _, _, err := p.frontProxyCA.IssueFiles(now, dir, "front-proxy-client", pki.Leaf{CommonName: "front-proxy-client", Client: true}); err != nil {
		return nil, err
	}
	key, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	return p, keyutil.WriteKey(p.file("sa.key"), key)
}

// file is the path of the PKI file name, "apiserver.crt" say.
func (p *clusterPKI) file(name string) string { return filepath.Join(p.dir, name) }
