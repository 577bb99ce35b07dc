package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// metricsServerModule is where metrics-server's own manifests come from:
// the module that make tools builds metrics-server from.
const (
	metricsServerModule     = "sigs.k8s.io/metrics-server"
	metricsServerToolsDir   = "test/tools/metrics-server"
	metricsServerManifests  = "manifests/overlays/release"
	metricsServerDeployment = "metrics-server"
)

// DeployMetricsServerManifests installs metrics-server v0.8.0 as its users
// do, from its own release manifests applied client-side (kubectl apply -f
// components.yaml): every object but the Deployment unchanged except the
// Service and APIService port, and the Deployment's container run as a
// local process with its own args plus what a process outside the cluster
// needs. It returns once v1beta1.metrics.k8s.io is Available.
func DeployMetricsServerManifests(ctx context.Context, c *cluster.Cluster, binDir, kubeletCAFile string, resolution, timeout time.Duration) (*MetricsServer, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := moduleDir(ctx, filepath.Join(root, metricsServerToolsDir), metricsServerModule)
	if err != nil {
		return nil, err
	}
	w, err := renderWorkload(ctx, c, filepath.Join(dir, metricsServerManifests), metricsServerDeployment, metricsServerDeployment)
	if err != nil {
		return nil, err
	}
	objs, deploy, manifestArgs, sa := w.objs, w.deploy, w.args, w.serviceAccount
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	apply, _, err := onLoopback(objs, ports[0])
	if err != nil {
		return nil, err
	}
	if err := Apply(ctx, c, "metrics-server-release", apply, "--server-side=false"); err != nil {
		return nil, err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, deploy.GetNamespace(), sa)
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(c.WorkDir(), "metrics-server-certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, err
	}
	args := append(append([]string{}, manifestArgs...), metricsServerArgs(kubeconfig, ports[0], certDir, kubeletCAFile, resolution, timeout)...)
	proc, err := c.StartProcess("metrics-server-release", filepath.Join(binDir, cluster.MetricsServerBinary), args...)
	if err != nil {
		return nil, err
	}
	m := &MetricsServer{Process: proc, Port: ports[0], cluster: c}
	return m, c.WaitForAPIServiceAvailable(ctx, MetricsAPIServices[0])
}

// moduleDir returns the directory of module in the module cache, as
// required by the tools module in toolsDir, downloading it if needed.
func moduleDir(ctx context.Context, toolsDir, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = toolsDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var m struct{ Dir string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Dir == "" {
		err = errors.New("no directory")
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s in %s: %w", module, toolsDir, err)
	}
	return m.Dir, nil
}
