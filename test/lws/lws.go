// Package lws runs the LeaderWorkerSet controller (sigs.k8s.io/lws) next to a
// local control plane from package cluster, so that tests and demos can
// create real LeaderWorkerSets: the controller creates the leader and worker
// StatefulSets, kube-controller-manager their pods, kube-scheduler binds them
// and kwok runs them.
//
// The controller runs as a local process under its own ServiceAccount with the
// RBAC rules from the lws module's config/rbac. Its admission webhooks listen
// on 127.0.0.1 with a serving certificate from the cluster CA, and
// kube-apiserver calls them by URL.
package lws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// The controller's binary in the bin directory (also its process name, and
// so its log's), and its namespace and ServiceAccount.
const (
	ControllerBinary = "lws-controller"
	Namespace        = "lws-system"
	ServiceAccount   = "lws-controller-manager"
)

// Controller is a running LeaderWorkerSet controller.
type Controller struct {
	proc        *cluster.Process
	moduleDir   string
	webhookPort int
	healthPort  int
	metricsPort int
}

// Install makes LeaderWorkerSets work in c: it applies the lws CRDs, creates
// the controller's ServiceAccount and RBAC, starts binDir/lws-controller and
// registers its mutating and validating webhooks. It returns once the
// controller reports ready and its webhooks admit a dry-run LeaderWorkerSet.
//
// The CRDs, RBAC rules and webhook configurations come from the source of
// the release the binary was built from (cluster.SourceDir). Files Install
// writes (configuration, manifests, webhook certificate) go to <cluster work
// dir>/lws. If ctx has no deadline, Install gives up after two minutes. On
// error the controller is not left running.
func Install(ctx context.Context, c *cluster.Cluster, binDir string) (*Controller, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	bin := filepath.Join(binDir, ControllerBinary)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("lws controller binary: %w", err)
	}
	moduleDir, err := cluster.SourceDir(ctx, bin)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.WorkDir(), "lws")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{moduleDir: moduleDir, webhookPort: ports[0], healthPort: ports[1], metricsPort: ports[2]}
	err = applyCRDs(ctx, c, moduleDir)
	if err == nil {
		err = applyRBAC(ctx, c, moduleDir, dir)
	}
	if err == nil {
		err = applyWebhooks(ctx, c, moduleDir, dir, ctrl.WebhookURL())
	}
	if err == nil {
		err = ctrl.start(ctx, c, bin, dir)
	}
	if err != nil {
		return nil, err
	}
	if err := ctrl.waitReady(ctx, c); err != nil {
		return nil, errors.Join(err, ctrl.Stop())
	}
	return ctrl, nil
}

func (ctrl *Controller) start(ctx context.Context, c *cluster.Cluster, bin, dir string) error {
	certDir := filepath.Join(dir, "certs")
	if err := writeServingCert(c, certDir); err != nil {
		return err
	}
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(ctrl.config(certDir)), 0o644); err != nil {
		return fmt.Errorf("write lws controller config: %w", err)
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, Namespace, ServiceAccount)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "ENABLE_WEBHOOKS=true")
	ctrl.proc, err = c.StartProcessWithEnv(ControllerBinary, env, bin,
		"--kubeconfig="+kubeconfig,
		"--config="+configPath,
		"--leader-elect=false",
		"--zap-devel=false",
	)
	return err
}

// config is the controller's configuration file (config.lws.x-k8s.io
// Configuration): no leader election, no internal certificate management
// (which would want a Secret and a Service), every server on loopback.
func (ctrl *Controller) config(certDir string) string {
	return fmt.Sprintf(`apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %q
metrics:
  bindAddress: %q
health:
  healthProbeBindAddress: %q
`, ctrl.webhookPort, certDir, loopbackAddr(ctrl.metricsPort), loopbackAddr(ctrl.healthPort))
}

// writeServingCert issues the webhook server's certificate for 127.0.0.1
// and localhost and stores it as certDir/tls.crt and tls.key, the names the
// controller's webhook server reads.
func writeServingCert(c *cluster.Cluster, certDir string) error {
	certFile, keyFile, err := c.IssueServingCert("lws-webhook", "127.0.0.1", "localhost")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", certDir, err)
	}
	for from, to := range map[string]string{certFile: "tls.crt", keyFile: "tls.key"} {
		data, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(filepath.Join(certDir, to), data, 0o600)
		}
		if err != nil {
			return fmt.Errorf("copy webhook certificate: %w", err)
		}
	}
	return nil
}

func (ctrl *Controller) waitReady(ctx context.Context, c *cluster.Cluster) error {
	httpClient := &http.Client{Timeout: 5 * time.Second}
	if err := cluster.Poll(ctx, "lws-controller /readyz", []*cluster.Process{ctrl.proc}, func(ctx context.Context) error {
		return cluster.CheckOK(ctx, httpClient, "http://"+loopbackAddr(ctrl.healthPort)+"/readyz")
	}); err != nil {
		return err
	}

	probe := NewLeaderWorkerSet(metav1.NamespaceDefault, "lws-webhook-probe", 1, 1, "", nil)
	return cluster.Poll(ctx, "the lws webhooks to admit a dry-run LeaderWorkerSet", []*cluster.Process{ctrl.proc}, func(ctx context.Context) error {
		_, err := c.Dynamic().Resource(GroupVersionResource).Namespace(probe.GetNamespace()).
			Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// Stop stops the controller and waits for it to exit. The CRDs and webhook
// configurations stay; as the webhooks fail closed, LeaderWorkerSets and their
// pods can then be neither created nor updated. The cluster's Stop also stops
// the controller.
func (ctrl *Controller) Stop() error { return ctrl.proc.Stop() }

// Process is the controller's process, ModuleDir the sigs.k8s.io/lws module
// directory the CRDs, RBAC rules and webhook configurations came from, and
// WebhookURL the webhook server's base URL, https://127.0.0.1:<port>.
func (ctrl *Controller) Process() *cluster.Process { return ctrl.proc }
func (ctrl *Controller) ModuleDir() string         { return ctrl.moduleDir }
func (ctrl *Controller) WebhookURL() string        { return "https://" + loopbackAddr(ctrl.webhookPort) }

func loopbackAddr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
