package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

type options struct {
	dir      string
	nodes    int
	realNode bool
	down     bool
}

const (
	pidFile      = "demo.pid"
	demoNS       = "demo"
	startTimeout = 4 * time.Minute
)

// paths resolves the repository root, the bin directory and the demo
// directory.
func (o *options) paths() (root, bin string, err error) {
	root, errRoot := env.RepoRoot()
	bin, errBin := env.BinDir()
	dir, errDir := filepath.Abs(cmp.Or(o.dir, filepath.Join(root, ".demo")))
	o.dir = dir
	return root, bin, errors.Join(errRoot, errBin, errDir)
}

func up(ctx context.Context, o options) error {
	began := time.Now()
	root, bin, err := o.paths()
	if err != nil {
		return err
	}
	// cluster.Start checks the control plane's own binaries.
	if err := env.CheckBinaries(bin, env.ServerBinary); err != nil {
		return err
	}
	if pid, alive := runningPid(o.dir); alive {
		return fmt.Errorf("a demo is already running (pid %d); stop it with `make demo-down`", pid)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.dir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer func() { _ = os.Remove(filepath.Join(o.dir, pidFile)) }()
	// A real node of a demo that died in this directory may still run
	// containers and hold mounts in it.
	if err := cleanUpRealNodes(filepath.Join(o.dir, "cluster")); err != nil {
		return err
	}

	fmt.Println("Starting the control plane ...")
	// The server's HPA readiness rule must be the controller manager's.
	opts := cluster.Options{
		BinDir: bin, WorkDir: filepath.Join(o.dir, "cluster"),
		HPACPUInitializationPeriod: 5 * time.Second, HPAInitialReadinessDelay: 5 * time.Second,
	}
	// The control plane stops on an interrupt until the real node starts;
	// from then on it stops after the node, in the deferred calls' order,
	// so that the node's Stop removes its containers through a live
	// containerd and deletes its Node.
	clusterCtx, stopCluster := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCluster()
	followInterrupt := context.AfterFunc(ctx, stopCluster)
	c, err := cluster.Start(clusterCtx, opts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping ...")
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: stop: %v\n", err)
		}
	}()

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	fmt.Println("Starting the fake kubelet fleet ...")
	fleet, err := env.StartFleet(ctx, c, env.FleetConfig{Nodes: o.nodes})
	if err != nil {
		return withLogs(c, err)
	}
	defer func() { _ = fleet.Close() }()
	// The fleet's control API serves users of the demo.
	ctl, control, err := fakecore.Listen("127.0.0.1:0", fakekubelet.NewControlHandler(fleet.Fleet))
	if err != nil {
		return err
	}
	defer func() { _ = ctl.Stop() }()
	uk, err := startUnikernels(startCtx, ctx, c, o)
	if err != nil {
		return withLogs(c, err)
	}
	defer func() { _ = uk.Close() }()
	// The real node's kubelet serves a certificate of the cluster CA.
	kubeletCA, err := kubeletCABundle(c, fleet.CAFile)
	if err != nil {
		return err
	}
	fmt.Println("Deploying group-metrics-server from manifests/base ...")
	srv, err := env.DeployServer(startCtx, c, env.ServerConfig{
		BinDir:        bin,
		KubeletCAFile: kubeletCA,
		ExtraArgs: append([]string{
			"--horizontal-pod-autoscaler-cpu-initialization-period=" + opts.HPACPUInitializationPeriod.String(),
			"--horizontal-pod-autoscaler-initial-readiness-delay=" + opts.HPAInitialReadinessDelay.String(),
		}, uk.ServerArgs()...),
	})
	if err != nil {
		return withLogs(c, err)
	}
	if err := deploySample(startCtx, c, control); err != nil {
		return withLogs(c, err)
	}
	if err := waitForTop(startCtx, c, demoNS, "web-"); err != nil {
		return withLogs(c, err)
	}
	if err := unikernelsReady(startCtx, c, uk, root); err != nil {
		return withLogs(c, err)
	}
	lwsModuleDir, err := startLWS(startCtx, c, root, bin, control)
	if err != nil {
		return withLogs(c, err)
	}
	if o.realNode {
		if !followInterrupt() {
			return ctx.Err()
		}
		n, err := realNodeIfPossible(ctx, c, root, bin, lwsModuleDir)
		if err != nil {
			return err
		}
		if n != nil {
			defer stopRealNode(n)
		}
	}
	printHowTo(c, root, control, srv, time.Since(began))

	select {
	case <-ctx.Done():
	case <-c.Stopped():
		return errors.New("the control plane stopped")
	case <-srv.Process.Done():
		return withLogs(c, fmt.Errorf("group-metrics-server exited: %w", cmp.Or(srv.Process.Err(), errors.New("exit status 0"))))
	}
	return nil
}

// kubeletCABundle writes the fleet's CA and the cluster CA into one file,
// so that the server verifies both the fake kubelets and the real one.
func kubeletCABundle(c *cluster.Cluster, fleetCAFile string) (string, error) {
	fleetCA, err := os.ReadFile(fleetCAFile)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.WorkDir(), "kubelet-ca.crt")
	return path, os.WriteFile(path, append(fleetCA, c.CACertPEM()...), 0o644)
}

func withLogs(c *cluster.Cluster, err error) error {
	return fmt.Errorf("%w\n%s\n(logs: %s)", err, c.LogTails(20), c.LogDir())
}

// deploySample creates the demo namespace, a Deployment of three pods
// requesting 100m CPU each that the fleet reports at 50m and 64Mi, and an
// HPA that keeps them at 50% of their request.
func deploySample(ctx context.Context, c *cluster.Cluster, control string) error {
	if err := env.CreateNamespace(ctx, c.Client(), demoNS); err != nil {
		return err
	}
	spec := env.DeploymentSpec{Namespace: demoNS, Name: "web", Replicas: 3, CPURequest: "100m"}
	usage := map[string]string{"namespace": demoNS, "selector": spec.Selector().String(), "cpu": "50m", "memory": "64Mi"}
	if err := controlPut(ctx, control, "/v1/usage", usage); err != nil {
		return err
	}
	if err := env.CreateDeployment(ctx, c.Client(), spec); err != nil {
		return err
	}
	if err := env.CreateCPUHPA(ctx, c.Client(), demoNS, spec.Name, 1, 6, 50); err != nil {
		return err
	}
	_, err := env.WaitForRunningPods(ctx, c.Client(), demoNS, spec.Selector(), int(spec.Replicas))
	return err
}

// controlPut sends PUT path with body, JSON, to the fleet's control API.
func controlPut(ctx context.Context, control, path string, body any) error {
	return fakecore.Control{Address: control}.Do(ctx, http.MethodPut, path, body, nil)
}

// waitForTop waits until kubectl top pods prints three pods of namespace
// whose names start with prefix.
func waitForTop(ctx context.Context, c *cluster.Cluster, namespace, prefix string) error {
	return cluster.Poll(ctx, "kubectl top pods -n "+namespace, nil, func(ctx context.Context) error {
		out, _, err := c.Kubectl(ctx, "top", "pods", "-n", namespace)
		if err != nil {
			return err
		}
		if strings.Count(out, prefix) < 3 {
			return fmt.Errorf("not every pod yet:\n%s", out)
		}
		return nil
	})
}

// kubectlPath is the kubectl to print, relative to root when it is inside.
func kubectlPath(c *cluster.Cluster, root string) string {
	kubectl := c.BinaryPath(cluster.KubectlBinary)
	if rel, err := filepath.Rel(root, kubectl); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return kubectl
}

func printHowTo(c *cluster.Cluster, root, control string, srv *env.Server, took time.Duration) {
	fmt.Printf(`
group-metrics-server is up (%[1]s from start), serving metrics.k8s.io through the aggregator.

  export KUBECONFIG=%[2]s
  %[3]s top pods -A
  %[3]s top nodes
  %[3]s get hpa -n %[4]s -w
  %[3]s get --raw /apis/metrics.k8s.io/v1/namespaces/%[4]s/pods | head -c 600

Add load (the HPA scales web up within about half a minute), then take it away:

  curl -s -X PUT http://%[5]s/v1/usage -d '{"namespace":"%[4]s","selector":"app=web","cpu":"400m","memory":"64Mi"}'
  curl -s -X PUT http://%[5]s/v1/usage -d '{"namespace":"%[4]s","selector":"app=web","cpu":"50m","memory":"64Mi"}'

Break a node's kubelet and watch the server log it once:

  curl -s -X PUT http://%[5]s/v1/nodes/fake-node-0/fault -d '{"kind":"Dead"}'
  curl -s -X DELETE 'http://%[5]s/v1/nodes/*/fault'
  tail -f %[6]s

Logs of every process: %[7]s
Press Ctrl-C (or run 'make demo-down') to stop.
`, took.Round(100*time.Millisecond), c.KubeconfigPath(), kubectlPath(c, root), demoNS, control, srv.Process.LogPath(), c.LogDir())
}
