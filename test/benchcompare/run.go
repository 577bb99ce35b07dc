package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// bench is one run of the comparison.
type bench struct {
	opts  *Options
	out   io.Writer
	began time.Time

	root, binDir string
	// serverDir holds copies of both servers' binaries, so a rebuild of the
	// bin directory during the run does not change what later rounds run.
	serverDir string
	cluster   *cluster.Cluster
	fleetProc *cluster.Process
	fleet     *fakekubelet.FleetState
	apps      []app

	servingCert, servingKey string
}

// logf prints a progress line with the time since the start.
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.out, "[%s +%6.0fs] %s\n", time.Now().UTC().Format(time.TimeOnly), time.Since(b.began).Seconds(),
		fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o *Options, out io.Writer) (err error) {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	b := &bench{opts: o, out: out, began: time.Now()}
	if b.root, err = env.RepoRoot(); err != nil {
		return err
	}
	if b.binDir, err = env.BinDir(); o.BinDir != "" {
		b.binDir, err = filepath.Abs(o.BinDir)
	}
	if err != nil {
		return err
	}
	if err := env.CheckBinaries(b.binDir, cluster.EtcdBinary, cluster.APIServerBinary, cluster.ControllerManagerBinary,
		cluster.KubectlBinary, cluster.KwokBinary, cluster.MetricsServerBinary, env.ServerBinary); err != nil {
		return err
	}
	if b.serverDir, err = os.MkdirTemp("", "benchcompare-servers-"); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(b.serverDir) }()
	for _, name := range []string{cluster.MetricsServerBinary, env.ServerBinary} {
		data, err := os.ReadFile(filepath.Join(b.binDir, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(b.serverDir, name), data, 0o755)
		}
		if err != nil {
			return err
		}
	}
	b.printHeader()
	if o.BuildFleet {
		if err := b.buildFleet(ctx); err != nil {
			return err
		}
	} else if _, err := os.Stat(filepath.Join(b.binDir, fleetBinary)); err != nil {
		return fmt.Errorf("%w (run with --build-fleet)", err)
	}
	if err := b.startCluster(ctx); err != nil {
		return err
	}
	defer func() {
		b.logf("stopping every process")
		if stopErr := b.cluster.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()
	results, err := b.measure(ctx)
	if err != nil {
		return fmt.Errorf("%w\n%s\n(logs: %s)", err, b.cluster.LogTails(15), b.cluster.LogDir())
	}
	printReport(b.out, results)
	b.printFooter()
	return nil
}

// measure sets the cluster up and runs the rounds, metrics-server first in
// each pair.
func (b *bench) measure(ctx context.Context) ([]*roundResult, error) {
	if err := b.startFleet(ctx); err != nil {
		return nil, err
	}
	if err := b.createWorkload(ctx); err != nil {
		return nil, err
	}
	var err error
	b.servingCert, b.servingKey, err = b.cluster.IssueServingCert("bench-server", "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	b.printClusterMemory("cluster ready")
	var results []*roundResult
	for round := 1; round <= b.opts.Rounds; round++ {
		for _, kind := range []serverKind{metricsServer, groupMetricsServer} {
			res, err := b.runRound(ctx, kind, round)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round, kind.name, err)
			}
			results = append(results, res)
		}
	}
	b.printClusterMemory("after the rounds")
	return results, nil
}

// printClusterMemory prints the RSS of every running process of the cluster.
func (b *bench) printClusterMemory(when string) {
	var parts []string
	for _, p := range b.cluster.Processes() {
		select {
		case <-p.Done():
			continue
		default:
		}
		if m, err := readMemory(p.Pid()); err == nil {
			parts = append(parts, fmt.Sprintf("%s %.0f", p.Name(), mib(m.VmRSS)))
		}
	}
	nodes, pods := "?", "?"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if l, err := b.cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err == nil {
		nodes = fmt.Sprint(len(l.Items))
	}
	if l, err := b.cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: "status.phase=" + string(corev1.PodRunning)}); err == nil {
		pods = fmt.Sprint(len(l.Items))
	}
	b.logf("%s: %s nodes, %s Running pods; RSS (MiB): %s", when, nodes, pods, strings.Join(parts, ", "))
}

func (b *bench) printFooter() {
	fmt.Fprintf(b.out, "\nTotal time: %v; load average at the end: %s\n", time.Since(b.began).Round(time.Second), loadAverage())
	if b.opts.WorkDir != "" {
		fmt.Fprintf(b.out, "Work directory (logs of every process): %s\n", b.cluster.WorkDir())
	}
	_ = os.Stdout.Sync()
}
