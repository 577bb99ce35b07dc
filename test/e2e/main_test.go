//go:build e2e

// Package e2e runs group-metrics-server, deployed from manifests/base, on a
// real local control plane whose nodes are kwok nodes backed by a fake
// kubelet fleet. Run it with `make e2e` (binaries from `make tools build`).
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// The suite shares one control plane, fleet and server; every test works in
// its own namespace and leaves the fleet as it found it. Tests run one at a
// time, since the fault and differential tests read every node.
var suite struct {
	ctx     context.Context
	binDir  string
	opts    cluster.Options
	cluster *cluster.Cluster
	fleet   *env.Fleet
	server  *env.Server
	// resolution and timeout are the server's --metric-resolution and
	// --kubelet-request-timeout.
	resolution, timeout time.Duration
	ukpd                *env.Ukpd // the fake ukpd behind the server's ukpd source
	// kubeVersion is $GMS_K8S_VERSION: the release of the control plane
	// when it is not the one in bin/ (make e2e-compat).
	kubeVersion string
}

const (
	numNodes     = 3
	setupTimeout = 4 * time.Minute // starting the cluster, fleet and server
)

var nodeBase = fakekubelet.Usage{CPUNanoCores: 100e6, MemoryBytes: 512 << 20}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	suite.ctx = ctx

	binDir, err := env.BinDir()
	if err == nil {
		// cluster.Start checks the control plane's own binaries.
		err = env.CheckBinaries(binDir, env.ServerBinary, cluster.MetricsServerBinary)
	}
	var kubeBinDir, workDir string
	if err == nil {
		kubeBinDir, suite.kubeVersion, err = env.KubeBinDir(binDir)
	}
	if err == nil {
		workDir, err = os.MkdirTemp("", "gms-e2e-")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	suite.binDir = binDir
	suite.resolution, suite.timeout = 5*time.Second, 3*time.Second
	// The HPA timings are set explicitly because TestHPAScales derives its
	// bounds from them.
	suite.opts = cluster.Options{
		BinDir:                     binDir,
		KubeBinDir:                 kubeBinDir,
		WorkDir:                    workDir,
		HPASyncPeriod:              2 * time.Second,
		HPADownscaleStabilization:  5 * time.Second,
		HPACPUInitializationPeriod: 5 * time.Second,
		HPAInitialReadinessDelay:   5 * time.Second,
	}

	code := 1
	defer func() {
		if suite.fleet != nil {
			_ = suite.fleet.Close()
		}
		if suite.ukpd != nil {
			_ = suite.ukpd.Close()
		}
		if suite.cluster != nil {
			if code != 0 {
				fmt.Fprintf(os.Stderr, "e2e: failed; logs and manifests kept in %s\n", workDir)
			}
			if err := suite.cluster.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: stop cluster: %v\n", err)
			}
		}
		if code == 0 {
			_ = os.RemoveAll(workDir)
		}
	}()
	if err := setup(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		if suite.cluster != nil {
			fmt.Fprintf(os.Stderr, "%s\n", suite.cluster.LogTails(40))
		}
		return 1
	}
	// The scan reads the credentials the server started with now: a server
	// deployed later rewrites the same ServiceAccount's kubeconfig. No
	// credential given to a server may show in any log of the run or in
	// the server's self-metrics; a hit fails the suite.
	leaks := newLeakCheck()
	code = leaks.finish(m.Run())
	return code
}

func setup(ctx context.Context) error {
	// The cluster and the fleet's informer live as long as the suite's ctx;
	// waits are bounded by setupTimeout.
	waitCtx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	began := time.Now()
	c, err := cluster.Start(ctx, suite.opts)
	if err != nil {
		return err
	}
	suite.cluster = c
	tCluster := time.Since(began)
	if suite.fleet, err = env.StartFleet(ctx, c, env.FleetConfig{Nodes: numNodes, NodeBaseUsage: nodeBase}); err != nil {
		return err
	}
	tFleet := time.Since(began)
	if suite.ukpd, err = env.StartUkpd(filepath.Join(c.WorkDir(), "ukpd")); err != nil {
		return err
	}
	if suite.server, err = env.DeployServer(waitCtx, c, suiteServerConfig("", suite.ukpd.ServerArgs())); err != nil {
		return err
	}
	fmt.Printf("e2e setup: cluster %v, fleet and %d nodes %v, server Available %v (args: %s)\n",
		tCluster.Round(time.Millisecond), numNodes, tFleet.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond), strings.Join(suite.server.Args, " "))
	return nil
}

// suiteServerConfig configures a server named name ("": the default) as
// the suite's: its fleet, resolution and timeout, then the HPA readiness
// rule of the suite's kube-controller-manager, as an operator sets both to
// the same values, then extraArgs.
func suiteServerConfig(name string, extraArgs []string) env.ServerConfig {
	return env.ServerConfig{
		BinDir: suite.binDir, KubeletCAFile: suite.fleet.CAFile, ProcessName: name,
		MetricResolution: suite.resolution, KubeletRequestTimeout: suite.timeout,
		ExtraArgs: append([]string{
			"--horizontal-pod-autoscaler-cpu-initialization-period=" + suite.opts.HPACPUInitializationPeriod.String(),
			"--horizontal-pod-autoscaler-initial-readiness-delay=" + suite.opts.HPAInitialReadinessDelay.String(),
		}, extraArgs...),
	}
}
