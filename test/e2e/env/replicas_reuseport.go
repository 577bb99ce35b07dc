package env

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

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

// PinnedClient sends every request over a single connection to the
// server's address, so that with several replicas sharing the port all its
// requests reach the same replica. If that connection closes, the next one
// may reach another replica: check Replica again after the requests that
// must stay on one.
type PinnedClient struct {
	*http.Client
	// Base is https://127.0.0.1:<port>.
	Base string
}

// NewPinnedClient returns a client on a new connection, as the cluster admin
// verifying the certificate for ServiceHost. Close it when done.
func (s *Server) NewPinnedClient() (*PinnedClient, error) {
	tlsCfg, err := rest.TLSConfigFor(s.RESTConfig())
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	return &PinnedClient{Client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, Base: "https://" + s.Address()}, nil
}

// Close closes the client's connection.
func (c *PinnedClient) Close() { c.CloseIdleConnections() }

// Replica returns which of procs the client's connection reaches, by the
// process start time the server reports on /metrics.
func (c *PinnedClient) Replica(ctx context.Context, procs []*cluster.Process) (*cluster.Process, error) {
	code, body, err := Get(ctx, c.Client, c.Base+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: status %d: %.200s", code, body)
	}
	return replicaOf(procs, body)
}

// replicaOf returns which of procs reported the /metrics body, by its
// process start time.
func replicaOf(procs []*cluster.Process, body string) (*cluster.Process, error) {
	reported, ok, err := promtext.Value(body, "process_start_time_seconds")
	if err == nil && !ok {
		err = errors.New("no sample process_start_time_seconds")
	}
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range procs {
		st, err := ReadProc(p.Pid())
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

// PinnedClients opens connections until it has one to each of procs (all
// replicas on the server's port), trying at most maxDials connections. The
// kernel picks the replica of each connection.
func (s *Server) PinnedClients(ctx context.Context, procs []*cluster.Process, maxDials int) (map[*cluster.Process]*PinnedClient, error) {
	out := map[*cluster.Process]*PinnedClient{}
	var lastErr error
	for i := 0; i < maxDials && len(out) < len(procs); i++ {
		c, err := s.NewPinnedClient()
		if err != nil {
			return nil, err
		}
		p, err := c.Replica(ctx, procs)
		if err != nil || out[p] != nil {
			lastErr = err
			c.Close()
			continue
		}
		out[p] = c
	}
	if len(out) < len(procs) {
		for _, c := range out {
			c.Close()
		}
		return nil, fmt.Errorf("reached %d of %d replicas in %d connections (last error: %w)", len(out), len(procs), maxDials, lastErr)
	}
	return out, nil
}
