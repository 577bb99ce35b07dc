package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// profiler saves one round's Go profiles of a server, taken from its own
// /debug/pprof/ (both servers serve it with --profiling, to the cluster
// admin). A CPU profile covers a phase of the round; a heap profile is taken
// at its end.
type profiler struct {
	dir    string
	server *runningServer
	round  int
}

// profiler returns nil when no profiles are asked for.
func (b *bench) profiler(s *runningServer, round int) *profiler {
	if b.opts.ProfileDir == "" {
		return nil
	}
	return &profiler{dir: b.opts.ProfileDir, server: s, round: round}
}

// path is where the profile of kind ("cpu", "heap") of phase is saved.
func (p *profiler) path(phase, kind string) string {
	return filepath.Join(p.dir, fmt.Sprintf("%s-%d-%s-%s.pprof", p.server.kind.name, p.round, phase, kind))
}

// startCPU starts a CPU profile of d (whole seconds, at least one) for
// phase; the returned function waits for it and saves it. A nil profiler
// does nothing.
func (p *profiler) startCPU(ctx context.Context, phase string, d time.Duration) func() error {
	if p == nil {
		return func() error { return nil }
	}
	secs := max(1, int(d/time.Second))
	done := make(chan error, 1)
	go func() {
		done <- p.save(ctx, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), p.path(phase, "cpu"))
	}()
	return func() error { return <-done }
}

// heap saves a heap profile for phase; a nil profiler does nothing.
func (p *profiler) heap(ctx context.Context, phase string) error {
	if p == nil {
		return nil
	}
	return p.save(ctx, "/debug/pprof/heap", p.path(phase, "heap"))
}

func (p *profiler) save(ctx context.Context, path, file string) error {
	body, err := p.server.getOK(ctx, path)
	if err != nil {
		return err
	}
	return os.WriteFile(file, []byte(body), 0o644)
}
