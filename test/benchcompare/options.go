package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Options are the flags of benchcompare (see AddFlags). The size of the
// cluster and the number of rounds default to $BENCH_NODES, $BENCH_PODS and
// $BENCH_ROUNDS when those are set.
type Options struct {
	Nodes, PodsPerNode, Namespaces, PodsPerApp, Containers int
	Rounds                                                 int
	Resolution, RequestTimeout                             time.Duration
	WarmupCycles, WindowCycles                             int
	Probes                                                 int
	Clients                                                int
	LoadDuration                                           time.Duration
	LoadMaxRequests                                        int
	WorkDir, BinDir, ProfileDir                            string
	BuildFleet                                             bool
	ServerEnv, ServerArgs                                  []string
}

// NewOptions returns the defaults, with the environment applied.
func NewOptions() *Options {
	return &Options{
		Nodes:           envInt("BENCH_NODES", 500),
		PodsPerNode:     envInt("BENCH_PODS", 30),
		Namespaces:      50,
		PodsPerApp:      5,
		Containers:      2,
		Rounds:          envInt("BENCH_ROUNDS", 3),
		Resolution:      15 * time.Second,
		RequestTimeout:  10 * time.Second,
		WarmupCycles:    2,
		WindowCycles:    4,
		Probes:          4,
		Clients:         4,
		LoadDuration:    20 * time.Second,
		LoadMaxRequests: 4000,
		BuildFleet:      true,
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "Fake nodes ($BENCH_NODES).")
	fs.IntVar(&o.PodsPerNode, "pods", o.PodsPerNode, "Pods per node ($BENCH_PODS).")
	fs.IntVar(&o.Namespaces, "namespaces", o.Namespaces, "Namespaces the pods are spread over.")
	fs.IntVar(&o.PodsPerApp, "pods-per-app", o.PodsPerApp, "Pods sharing one app label: the pods a selector list matches.")
	fs.IntVar(&o.Containers, "containers", o.Containers, "Containers per pod.")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "Rounds per server ($BENCH_ROUNDS), run A B A B ...")
	fs.DurationVar(&o.Resolution, "metric-resolution", o.Resolution, "--metric-resolution of both servers (metrics-server needs at least 10s).")
	fs.DurationVar(&o.RequestTimeout, "kubelet-request-timeout", o.RequestTimeout, "--kubelet-request-timeout of both servers; below the resolution.")
	fs.IntVar(&o.WarmupCycles, "warmup-cycles", o.WarmupCycles, "Scrape cycles waited out after a server is ready.")
	fs.IntVar(&o.WindowCycles, "window-cycles", o.WindowCycles, "Scrape cycles in the steady window (CPU, RSS, cycle time).")
	fs.IntVar(&o.Probes, "probes", o.Probes, "New pods per round timed to their first metrics.")
	fs.IntVar(&o.Clients, "clients", o.Clients, "Concurrent clients of the list load.")
	fs.DurationVar(&o.LoadDuration, "load-duration", o.LoadDuration, "Duration of the load of each list shape.")
	fs.IntVar(&o.LoadMaxRequests, "load-max-requests", o.LoadMaxRequests, "Most requests of each list shape.")
	fs.StringVar(&o.WorkDir, "work-dir", o.WorkDir, "Directory for the control plane's files; temporary when empty.")
	fs.StringVar(&o.BinDir, "bin-dir", o.BinDir, "Directory of the binaries; $GMS_BIN_DIR or <repo>/bin when empty.")
	fs.StringVar(&o.ProfileDir, "profile-dir", o.ProfileDir, "Directory for each round's CPU and heap profiles of the steady window and the list load; both servers run with --profiling when set.")
	fs.StringSliceVar(&o.ServerArgs, "server-args", o.ServerArgs, "Flags added to group-metrics-server's command line (e.g. --kubelet-endpoint=resource); metrics-server keeps the shared ones.")
	fs.StringSliceVar(&o.ServerEnv, "server-env", o.ServerEnv, "KEY=VALUE added to group-metrics-server's environment (e.g. GOGC=50,GOMEMLIMIT=150MiB); metrics-server keeps the harness's.")
	fs.BoolVar(&o.BuildFleet, "build-fleet", o.BuildFleet, "Build "+fleetBinary+" into the bin directory first; when false, use the one there.")
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	for _, p := range []struct {
		flag       string
		value, min int
	}{
		{"nodes", o.Nodes, 1}, {"pods", o.PodsPerNode, 1}, {"namespaces", o.Namespaces, 1},
		{"pods-per-app", o.PodsPerApp, 1}, {"containers", o.Containers, 1}, {"rounds", o.Rounds, 1},
		{"window-cycles", o.WindowCycles, 1}, {"probes", o.Probes, 1}, {"clients", o.Clients, 1},
		{"load-max-requests", o.LoadMaxRequests, 1}, {"warmup-cycles", o.WarmupCycles, 0},
	} {
		if p.value < p.min {
			errs = append(errs, fmt.Errorf("--%s must be at least %d, got %d", p.flag, p.min, p.value))
		}
	}
	if o.Nodes > 5000 {
		errs = append(errs, fmt.Errorf("--nodes %d: at most 5000 (one listener each on this machine)", o.Nodes))
	}
	if o.Resolution < 10*time.Second {
		errs = append(errs, fmt.Errorf("--metric-resolution %v: metrics-server v0.8.0 needs at least 10s", o.Resolution))
	}
	if o.RequestTimeout <= 0 || o.RequestTimeout >= o.Resolution {
		errs = append(errs, errors.New("--kubelet-request-timeout must be positive and below --metric-resolution"))
	}
	for _, kv := range o.ServerEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("--server-env %q: want KEY=VALUE", kv))
		}
	}
	for _, a := range o.ServerArgs {
		if !strings.HasPrefix(a, "--") {
			errs = append(errs, fmt.Errorf("--server-args %q: want --flag or --flag=value", a))
		}
	}
	if o.LoadDuration <= 0 {
		errs = append(errs, errors.New("--load-duration must be positive"))
	}
	if o.PodsPerApp > 0 && o.Namespaces > 0 && o.Nodes*o.PodsPerNode < o.Namespaces*o.PodsPerApp {
		errs = append(errs, fmt.Errorf("%d pods do not fill %d namespaces with one app of %d pods each",
			o.Nodes*o.PodsPerNode, o.Namespaces, o.PodsPerApp))
	}
	return errs
}

func (o *Options) totalPods() int { return o.Nodes * o.PodsPerNode }
