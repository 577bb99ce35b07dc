//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/procfs"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// pinnedEndpoint reaches the server on its own port over a single
// connection, as the cluster admin verifying the certificate for
// ServiceHost, so that with several replicas sharing the port all its
// requests reach the same replica. If that connection closes, the next one
// may reach another replica: check replicaOf again after the requests that
// must stay on one. Close it with client.CloseIdleConnections.
func pinnedEndpoint(s *env.Server) (endpoint, error) {
	tlsCfg, err := rest.TLSConfigFor(s.RESTConfig())
	if err != nil {
		return endpoint{}, err
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	return endpoint{name: "pinned", base: "https://" + s.Address(), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// pinnedEndpoints opens connections until it has one to each of procs (all
// replicas on the server's port), trying at most maxDials connections. The
// kernel picks the replica of each connection.
func pinnedEndpoints(ctx context.Context, s *env.Server, procs []*cluster.Process, maxDials int) (map[*cluster.Process]endpoint, error) {
	out := map[*cluster.Process]endpoint{}
	var lastErr error
	for i := 0; i < maxDials && len(out) < len(procs); i++ {
		ep, err := pinnedEndpoint(s)
		if err != nil {
			return nil, err
		}
		p, err := replicaOf(ctx, ep, procs)
		if _, taken := out[p]; err != nil || taken {
			lastErr = err
			ep.client.CloseIdleConnections()
			continue
		}
		out[p] = ep
	}
	if len(out) < len(procs) {
		for _, ep := range out {
			ep.client.CloseIdleConnections()
		}
		return nil, fmt.Errorf("reached %d of %d replicas in %d connections (last error: %w)", len(out), len(procs), maxDials, lastErr)
	}
	return out, nil
}

// replicaOf returns which of procs ep's connection reaches, by the process
// start time the server reports on /metrics.
func replicaOf(ctx context.Context, ep endpoint, procs []*cluster.Process) (*cluster.Process, error) {
	body, err := selfMetrics(ctx, ep)
	if err != nil {
		return nil, err
	}
	reported, err := mustValue(body, "process_start_time_seconds")
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range procs {
		st, err := readProc(p.Pid())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Both come from /proc in USER_HZ ticks.
		if math.Abs(st.Start-reported) < 0.5/userHZ {
			return p, nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no process of %d started at %.2f", len(procs), reported)
}

// servedCertificate opens a new connection to the server's address, as the
// aggregator would: verifying the server for ServiceHost against caBundle.
// It returns which of procs (replicas sharing the port) answered, and the
// certificate it served. A certificate that does not verify is an error.
func servedCertificate(ctx context.Context, s *env.Server, procs []*cluster.Process, caBundle []byte) (*cluster.Process, *x509.Certificate, error) {
	tlsCfg, err := rest.TLSConfigFor(s.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	tlsCfg.RootCAs = x509.NewCertPool()
	if !tlsCfg.RootCAs.AppendCertsFromPEM(caBundle) {
		return nil, nil, errors.New("caBundle holds no certificate")
	}
	var served *x509.Certificate
	tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
		served = cs.PeerCertificates[0]
		return nil
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	p, err := replicaOf(ctx, endpoint{name: "served", base: "https://" + s.Address(), client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, procs)
	return p, served, err
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: the kernel
// reports them in USER_HZ ticks, 100 per second on every Linux architecture
// Go supports.
const userHZ = 100

// procStats is what /proc says about one process.
type procStats struct {
	// RSS is VmRSS from /proc/<pid>/status, in bytes.
	RSS uint64
	// CPU is user plus system time from /proc/<pid>/stat.
	CPU time.Duration
	// Start is when the process started, in Unix seconds, computed as the
	// Prometheus process collector does (with the same library): the boot
	// time from /proc/stat plus the start time in ticks from
	// /proc/<pid>/stat.
	Start float64
}

func readProc(pid int) (procStats, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procStats{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return procStats{}, err
	}
	stat, err := p.Stat()
	if err != nil {
		return procStats{}, err
	}
	start, err := stat.StartTime()
	if err != nil {
		return procStats{}, err
	}
	return procStats{RSS: status.VmRSS, CPU: time.Duration(stat.UTime+stat.STime) * time.Second / userHZ, Start: start}, nil
}
