package main

import (
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

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// serverKind is one of the two servers compared: its name in the report and
// its processes, its binary, the histogram of its scrape cycle's wall time,
// and the counter (with labels to match) of failed scrapes of a node.
type serverKind struct {
	name, binary, cycleMetric, failureMetric string
	failureMatch                             map[string]string
}

var (
	metricsServer = serverKind{
		name:          "metrics-server",
		binary:        cluster.MetricsServerBinary,
		cycleMetric:   "metrics_server_manager_tick_duration_seconds",
		failureMetric: "metrics_server_kubelet_request_total",
		failureMatch:  map[string]string{"success": "false"},
	}
	groupMetricsServer = serverKind{
		name:          "group-metrics-server",
		binary:        env.ServerBinary,
		cycleMetric:   "group_metrics_server_scraper_cycle_duration_seconds",
		failureMetric: "group_metrics_server_scraper_target_failures_total",
	}
)

// runningServer is one round's server process.
type runningServer struct {
	kind    serverKind
	proc    *cluster.Process
	baseURL string
	client  *http.Client
}

// serverArgs is the command line both servers get: the same flags, which
// group-metrics-server accepts as metrics-server does. Both act as the
// cluster admin toward kube-apiserver and the kubelets (the fleet accepts
// client certificates of the cluster CA), serve a certificate of the cluster
// CA on 127.0.0.1, and reach every node at 127.0.0.1 on the port in its
// status.
func (b *bench) serverArgs(port int, certDir string) []string {
	kubeconfig := b.cluster.KubeconfigPath()
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + b.servingCert,
		"--tls-private-key-file=" + b.servingKey,
		"--kubelet-use-node-status-port",
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + b.fleet.CAFile,
		"--metric-resolution=" + b.opts.Resolution.String(),
		"--kubelet-request-timeout=" + b.opts.RequestTimeout.String(),
	}
	if b.opts.ProfileDir != "" {
		args = append(args, "--profiling")
	}
	return args
}

// startServer starts a fresh process of kind for round and waits until it
// answers /readyz.
func (b *bench) startServer(ctx context.Context, kind serverKind, round int) (*runningServer, time.Duration, error) {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, 0, err
	}
	name := fmt.Sprintf("%s-%d", kind.name, round)
	certDir := filepath.Join(b.cluster.WorkDir(), name)
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, 0, err
	}
	began := time.Now()
	var env []string // nil: the harness's environment
	if kind.name == groupMetricsServer.name && len(b.opts.ServerEnv) > 0 {
		env = append(os.Environ(), b.opts.ServerEnv...)
	}
	args := b.serverArgs(ports[0], certDir)
	if kind.name == groupMetricsServer.name {
		args = append(args, b.opts.ServerArgs...)
	}
	proc, err := b.cluster.StartProcessWithEnv(name, env, filepath.Join(b.serverDir, kind.binary), args...)
	if err != nil {
		return nil, 0, err
	}
	s := &runningServer{
		kind:    kind,
		proc:    proc,
		baseURL: "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
	}
	// The server is reached directly as the cluster admin, verifying its
	// certificate against the cluster CA (the admin kubeconfig's), over
	// HTTP/2 as the aggregator does.
	cfg := b.cluster.RESTConfig()
	cfg.Timeout = time.Minute
	if s.client, err = rest.HTTPClientFor(cfg); err != nil {
		return s, 0, err
	}
	// Readiness needs the informers synced and one scrape of every node.
	wait := 2*time.Minute + 2*b.opts.Resolution + time.Duration(b.opts.totalPods())*time.Millisecond
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err = cluster.Poll(waitCtx, name+" to be ready",
		[]*cluster.Process{proc, b.fleetProc}, func(ctx context.Context) error {
			_, err := s.getOK(ctx, "/readyz")
			return err
		})
	return s, time.Since(began), err
}

// get fetches path from the server and returns the status code and body.
// With discard set, the body is read and counted but not kept.
func (s *runningServer) get(ctx context.Context, path string, discard *int64) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.baseURL+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if discard != nil {
		n, err := io.Copy(io.Discard, resp.Body)
		*discard = n
		return resp.StatusCode, "", err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	return resp.StatusCode, string(body), err
}

// getOK is get of a body that must come with 200 OK.
func (s *runningServer) getOK(ctx context.Context, path string) (string, error) {
	code, body, err := s.get(ctx, path, nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d: %.200s", code, strings.TrimSpace(body))
	}
	if err != nil {
		return "", fmt.Errorf("%s: GET %s: %w", s.kind.name, path, err)
	}
	return body, nil
}

// metrics scrapes the server's /metrics, keeping the named families.
func (s *runningServer) metrics(ctx context.Context, families ...string) (map[string]*dto.MetricFamily, error) {
	body, err := s.getOK(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return promtext.Families(body, families...)
}
