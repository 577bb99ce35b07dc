// Package cluster runs a real Kubernetes control plane on 127.0.0.1 for
// end-to-end tests and demos: etcd, kube-apiserver with the aggregation
// layer, kube-controller-manager, kube-scheduler and kwok, which plays the
// kubelet for fake nodes, and on request a real node (StartRealNode). Every
// component listens on a free loopback port, uses PKI generated under the
// work directory, and logs to <workdir>/logs/<name>.log.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// Cluster is a running control plane. Its methods are safe for concurrent use.
type Cluster struct {
	opts       Options
	workDir    string
	ownWorkDir bool
	pkiDir     string
	logDir     string
	ports      map[string]int // by component, as Ports
	pki        *clusterPKI

	adminKubeconfig string
	restConfig      *rest.Config
	client          kubernetes.Interface
	dynamic         dynamic.Interface

	mu       sync.Mutex
	procs    []*Process
	stopping bool

	stopOnce sync.Once
	stopErr  error
	stopped  chan struct{}
}

// Start brings up a control plane and returns once every component is ready:
// etcd is healthy, kube-apiserver answers /readyz, the system namespaces
// exist, the controller manager, scheduler and kwok answer their health
// checks, and the default ServiceAccount exists in the default namespace.
//
// ctx governs the whole life of the cluster: when it is done (for example on
// SIGINT through signal.NotifyContext) the cluster stops itself. Start itself
// gives up after Options.StartTimeout. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("cluster options: %w", err)
	}
	// Ports are picked before the components bind them, so another process
	// can occasionally take one first; such a start is retried from scratch.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c, err := startOnce(ctx, opts)
		if err == nil || attempt == attempts || !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			return c, err
		}
	}
}

func startOnce(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, stopped: make(chan struct{})}
	if err := c.prepareWorkDir(); err != nil {
		return nil, err
	}

	go func() {
		select {
		case <-ctx.Done():
			_ = c.Stop()
		case <-c.stopped:
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := c.start(startCtx); err != nil {
		tails := c.LogTails(30)
		return nil, fmt.Errorf("start cluster: %w\n%s", errors.Join(err, c.Stop()), tails)
	}
	return c, nil
}

func (c *Cluster) prepareWorkDir() error {
	workDir, err := c.opts.WorkDir, error(nil)
	if workDir == "" {
		workDir, err = os.MkdirTemp("", "gms-cluster-")
		c.ownWorkDir = true
	}
	abs, err2 := filepath.Abs(workDir)
	if err = errors.Join(err, err2); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	c.workDir = abs
	c.pkiDir = filepath.Join(abs, "pki")
	c.logDir = filepath.Join(abs, "logs")
	// A reused work directory starts from scratch: no state from an earlier
	// cluster (etcd data, credentials, logs) carries over.
	for _, d := range []string{c.pkiDir, c.logDir, filepath.Join(abs, "kubeconfigs"), filepath.Join(abs, "etcd")} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clean %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

func (c *Cluster) start(ctx context.Context) error {
	names := []string{"etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kwok"}
	if !c.opts.WithoutScheduler {
		names = append(names, "kube-scheduler")
	}
	p, err := FreePorts(len(names))
	if err != nil {
		return err
	}
	c.ports = map[string]int{}
	for i, name := range names {
		c.ports[name] = p[i]
	}
	if c.pki, err = newClusterPKI(c.pkiDir); err != nil {
		return err
	}
	if err := c.writeKubeconfigs(); err != nil {
		return err
	}
	for _, start := range []func(context.Context) error{c.startEtcd, c.startAPIServer, c.startControllers} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stopTiers orders Stop: every other process first, all at once; then
// kube-apiserver, then etcd.
var stopTiers = map[string]int{"kube-apiserver": 1, "etcd": 2}

// Stop stops every process the cluster started, its own and those from
// StartProcess, and waits for them to exit. It removes the work directory if
// Start created it. Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopping = true // c.procs changes no more
		c.mu.Unlock()

		errs := make([]error, len(c.procs))
		for tier := range 3 {
			var wg sync.WaitGroup
			for i, p := range c.procs {
				if stopTiers[p.name] == tier {
					wg.Go(func() { errs[i] = p.Stop() })
				}
			}
			wg.Wait()
		}
		if c.ownWorkDir {
			if err := os.RemoveAll(c.workDir); err != nil {
				errs = append(errs, fmt.Errorf("remove work dir: %w", err))
			}
		}
		c.stopErr = errors.Join(errs...)
		close(c.stopped)
	})
	return c.stopErr
}

// Stopped is closed when Stop has finished.
func (c *Cluster) Stopped() <-chan struct{} { return c.stopped }

// StartProcess runs the binary at path with args, sending its output to
// <workdir>/logs/<name>.log. The process inherits this process's environment
// and is stopped by Stop. name must be unique within the cluster.
func (c *Cluster) StartProcess(name, path string, args ...string) (*Process, error) {
	return c.StartProcessWithEnv(name, nil, path, args...)
}

// StartProcessWithEnv is StartProcess with the environment env (nil
// inherits, as for os/exec.Cmd.Env).
func (c *Cluster) StartProcessWithEnv(name string, env []string, path string, args ...string) (*Process, error) {
	if name == "" || filepath.Base(name) != name {
		return nil, fmt.Errorf("invalid process name %q", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return nil, fmt.Errorf("start %s: cluster is stopped", name)
	}
	if slices.ContainsFunc(c.procs, func(p *Process) bool { return p.name == name }) {
		return nil, fmt.Errorf("start %s: a process with that name already exists", name)
	}
	p, err := startProcess(name, filepath.Join(c.logDir, name+".log"), stopGracePeriod, env, path, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Processes returns every process the cluster started, in start order.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.procs)
}

// LogTails returns the last n lines of every process log, in start order,
// each under a header naming the process.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, p := range c.Processes() {
		fmt.Fprintf(&b, "==> %s (%s) <==\n", p.name, filepath.Base(p.logPath))
		if tail, err := tailFile(p.logPath, n); err != nil {
			fmt.Fprintf(&b, "(cannot read log: %v)\n", err)
		} else {
			b.WriteString(tail + "\n")
		}
	}
	return b.String()
}

// KubeconfigPath, RESTConfig (a copy), Client and Dynamic are the admin's
// (system:masters) kubeconfig file, client configuration, clientset and
// dynamic client.
func (c *Cluster) KubeconfigPath() string       { return c.adminKubeconfig }
func (c *Cluster) RESTConfig() *rest.Config     { return rest.CopyConfig(c.restConfig) }
func (c *Cluster) Client() kubernetes.Interface { return c.client }
func (c *Cluster) Dynamic() dynamic.Interface   { return c.dynamic }

// APIServerURL returns kube-apiserver's base URL, https://127.0.0.1:<port>.
func (c *Cluster) APIServerURL() string { return "https://" + hostPort(c.ports["kube-apiserver"]) }

// WorkDir holds PKI, kubeconfigs, data and LogDir, which holds <name>.log
// for every process.
func (c *Cluster) WorkDir() string { return c.workDir }
func (c *Cluster) LogDir() string  { return c.logDir }

// BinaryPath is the path of the named binary (APIServerBinary, say) this
// cluster runs; Ports are the control plane's loopback ports by component
// (kwok: its health endpoint).
func (c *Cluster) BinaryPath(name string) string { return c.opts.binPath(name) }
func (c *Cluster) Ports() map[string]int         { return maps.Clone(c.ports) }

// CACertFile and CACertPEM are the cluster CA certificate, also
// kube-apiserver's client CA.
func (c *Cluster) CACertFile() string { return c.pki.file("ca.crt") }
func (c *Cluster) CACertPEM() []byte  { return c.pki.ca.CertPEM() }

// IssueServingCert signs a serving certificate with the cluster CA for hosts
// (IP addresses or DNS names), writes <workdir>/pki/issued/<name>.crt and
// <name>.key, and returns their paths.
func (c *Cluster) IssueServingCert(name string, hosts ...string) (certFile, keyFile string, err error) {
	if name == "" || filepath.Base(name) != name {
		return "", "", fmt.Errorf("invalid certificate name %q", name)
	}
	leaf := pki.Leaf{CommonName: name, Hosts: hosts, Server: true}
	return c.pki.ca.IssueFiles(time.Now(), filepath.Join(c.pkiDir, "issued"), name, leaf)
}
