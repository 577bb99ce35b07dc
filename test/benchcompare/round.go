package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// roundResult holds one round's figures, keyed by figure key (see figures),
// and the notes printed with its raw values.
type roundResult struct {
	server string
	round  int
	values map[string]float64
	notes  []string
}

func (r *roundResult) notef(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// runRound starts a fresh server of kind and measures it: the steady window
// (CPU per cycle, RSS, cycle wall time), new pods' time to first metrics,
// then list latency under load. The process is stopped before it returns.
func (b *bench) runRound(ctx context.Context, kind serverKind, round int) (res *roundResult, err error) {
	res = &roundResult{server: kind.name, round: round, values: map[string]float64{}}
	b.logf("round %d: %s: starting", round, kind.name)
	s, readyAfter, err := b.startServer(ctx, kind, round)
	if s != nil {
		defer func() {
			if stopErr := s.proc.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}()
	}
	if err != nil {
		return nil, err
	}
	res.values[figReady] = readyAfter.Seconds()
	b.logf("round %d: %s: ready after %v (pid %d); warm-up %d cycles", round, kind.name,
		readyAfter.Round(100*time.Millisecond), s.proc.Pid(), b.opts.WarmupCycles)
	if err := b.sleep(ctx, time.Duration(b.opts.WarmupCycles)*b.opts.Resolution, s); err != nil {
		return nil, err
	}
	prof := b.profiler(s, round)
	if err := b.steadyWindow(ctx, s, res, prof); err != nil {
		return nil, err
	}
	if err := b.probeNewPods(ctx, s, res); err != nil {
		return nil, err
	}
	if err := b.listLoad(ctx, s, res, prof); err != nil {
		return nil, err
	}
	mem, err := readMemory(s.proc.Pid())
	if err != nil {
		return nil, err
	}
	res.values[figPeakRSSAll] = mib(mem.VmHWM)
	res.notef("load average at the end of the round: %s", loadAverage())
	b.logf("round %d: %s: done, peak RSS %.0f MiB including the list load", round, kind.name, mib(mem.VmHWM))
	return res, nil
}

// sleep waits d, failing early when ctx ends or the server exits.
func (b *bench) sleep(ctx context.Context, d time.Duration, s *runningServer) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.proc.Done():
		return fmt.Errorf("%s exited: %w (log %s)", s.proc.Name(), exitError(s.proc), s.proc.LogPath())
	case <-b.fleetProc.Done():
		return fmt.Errorf("the fleet exited: %w (log %s)", exitError(b.fleetProc), b.fleetProc.LogPath())
	}
}

// exitError is how p exited, never nil.
func exitError(p *cluster.Process) error {
	return cmp.Or(p.Err(), errors.New("exit status 0"))
}

// windowEnd is what is read at each end of the steady window; at is when
// cpu was read.
type windowEnd struct {
	at                                  time.Time
	cpu, cycleSum, cycleCount, failures float64
}

func (b *bench) readWindowEnd(ctx context.Context, s *runningServer) (windowEnd, error) {
	at := time.Now()
	cpu, err := cpuSeconds(s.proc.Pid())
	if err != nil {
		return windowEnd{}, err
	}
	m, err := s.metrics(ctx, s.kind.cycleMetric, s.kind.failureMetric)
	if err != nil {
		return windowEnd{}, err
	}
	end, err := s.kind.windowEnd(m)
	end.at, end.cpu = at, cpu
	return end, err
}

// windowEnd reads the sum and count of the kind's unlabelled cycle
// histogram and its failed scrapes from the families of its /metrics.
func (k serverKind) windowEnd(m map[string]*dto.MetricFamily) (windowEnd, error) {
	sum, okSum := promtext.Sum(m, k.cycleMetric+"_sum", nil)
	count, okCount := promtext.Sum(m, k.cycleMetric+"_count", nil)
	if !okSum || !okCount {
		return windowEnd{}, fmt.Errorf("%s /metrics has no %s", k.name, k.cycleMetric)
	}
	failures, _ := promtext.Sum(m, k.failureMetric, k.failureMatch)
	return windowEnd{cycleSum: sum, cycleCount: count, failures: failures}, nil
}

// steadyWindow measures WindowCycles × resolution of the server left alone.
// Both servers scrape on a fixed ticker, so a window of a whole number of
// periods holds that many cycles' worth of CPU whatever its phase. The
// window starts and ends with the same reads (CPU, then /metrics), so one
// /metrics request is inside it for both servers.
//
// With profiles asked for, a CPU profile covers the window but its last
// second, and a heap profile is taken after it.
func (b *bench) steadyWindow(ctx context.Context, s *runningServer, res *roundResult, prof *profiler) error {
	k := b.opts.WindowCycles
	length := time.Duration(k) * b.opts.Resolution
	b.logf("round %d: %s: steady window of %d cycles (%v)", res.round, s.kind.name, k, length)
	start, err := b.readWindowEnd(ctx, s)
	if err != nil {
		return err
	}
	waitProfile := prof.startCPU(ctx, "steady", length-time.Second)
	stopSampling := sampleRSS(ctx, s.proc.Pid())
	err = b.sleep(ctx, time.Until(start.at.Add(length)), s)
	rss, sampleErr := stopSampling()
	if err := cmp.Or(err, sampleErr); err != nil {
		return err
	}
	end, err := b.readWindowEnd(ctx, s)
	if err != nil {
		return err
	}
	mem, err := readMemory(s.proc.Pid())
	if err != nil {
		return err
	}
	if err := waitProfile(); err != nil {
		return err
	}
	if err := prof.heap(ctx, "steady"); err != nil {
		return err
	}
	cycles := end.cycleCount - start.cycleCount
	if cycles <= 0 {
		return fmt.Errorf("%s finished no scrape cycle in %v", s.kind.name, length)
	}
	// The window is length to within a few milliseconds of scheduling; the
	// CPU is scaled to exactly k periods.
	res.values[figCPU] = (end.cpu - start.cpu) / float64(k) * float64(length) / float64(end.at.Sub(start.at))
	res.values[figPeakRSS] = mib(mem.VmHWM)
	res.values[figSteadyRSS] = median(rss)
	res.values[figCycle] = (end.cycleSum - start.cycleSum) / cycles
	res.values[figFailures] = end.failures - start.failures
	res.notef("at the end of the steady window: RSS %.0f MiB, of it %.0f MiB anonymous (heap, stacks, runtime) and %.0f MiB of mapped files (the binary)",
		mib(mem.VmRSS), mib(mem.RssAnon), mib(mem.RssFile))
	if note, err := b.goMemory(ctx, s); err != nil {
		return err
	} else if note != "" {
		res.notef("%s", note)
	}
	res.notef("steady window: %.0f cycles completed, %d RSS samples (min %.0f, max %.0f MiB)",
		cycles, len(rss), slices.Min(rss), slices.Max(rss))
	b.logf("round %d: %s: CPU %.3f s/cycle, cycle %.3f s, RSS %.0f MiB (peak %.0f), failed scrapes %.0f",
		res.round, s.kind.name, res.values[figCPU], res.values[figCycle], res.values[figSteadyRSS],
		res.values[figPeakRSS], res.values[figFailures])
	return nil
}

// sampleRSS reads the RSS of pid, in MiB, now and every second until the
// returned function is called, which returns the samples.
func sampleRSS(ctx context.Context, pid int) func() ([]float64, error) {
	ctx, stop := context.WithCancel(ctx)
	var (
		rss []float64
		err error
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			m, readErr := readMemory(pid)
			if readErr != nil && err == nil {
				err = fmt.Errorf("sample RSS: %w", readErr)
			}
			rss = append(rss, mib(m.VmRSS))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() ([]float64, error) {
		stop()
		wg.Wait()
		return rss, err
	}
}

// goMemoryClasses are the Go runtime's memory classes (runtime/metrics
// /memory/classes/...) that are resident: what the anonymous part of the
// RSS is made of. Both servers export them through component-base's Go
// collector; the heap's released pages are left out, as they are not
// resident.
var goMemoryClasses = []struct{ family, label string }{
	{"go_memory_classes_heap_objects_bytes", "live and not yet swept heap objects"},
	{"go_memory_classes_heap_unused_bytes", "unused in heap spans"},
	{"go_memory_classes_heap_free_bytes", "free heap not yet returned"},
	{"go_memory_classes_os_stacks_bytes", "OS thread stacks"},
	{"go_memory_classes_heap_stacks_bytes", "goroutine stacks"},
	{"go_memory_classes_metadata_other_bytes", "runtime metadata"},
	{"go_memory_classes_metadata_mspan_inuse_bytes", "span metadata"},
	{"go_memory_classes_metadata_mcache_inuse_bytes", "mcache metadata"},
	{"go_memory_classes_profiling_buckets_bytes", "profiling buckets"},
	{"go_memory_classes_other_bytes", "other"},
}

// goMemory describes what the Go runtime holds at the end of the steady
// window, class by class, and the number of goroutines; "" when the
// server exports none of it.
func (b *bench) goMemory(ctx context.Context, s *runningServer) (string, error) {
	families := []string{"go_goroutines"}
	for _, c := range goMemoryClasses {
		families = append(families, c.family)
	}
	m, err := s.metrics(ctx, families...)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, c := range goMemoryClasses {
		if v, ok := promtext.Sum(m, c.family, nil); ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", c.label, v/(1<<20)))
		}
	}
	if len(parts) == 0 {
		return "", nil
	}
	goroutines, _ := promtext.Sum(m, "go_goroutines", nil)
	return fmt.Sprintf("Go memory at the end of the steady window (MiB): %s; %.0f goroutines", strings.Join(parts, ", "), goroutines), nil
}

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
		done <- p.save(ctx, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), phase, "cpu")
	}()
	return func() error { return <-done }
}

// heap saves a heap profile for phase; a nil profiler does nothing.
func (p *profiler) heap(ctx context.Context, phase string) error {
	if p == nil {
		return nil
	}
	return p.save(ctx, "/debug/pprof/heap", phase, "heap")
}

// save saves the profile at path as <server>-<round>-<phase>-<kind>.pprof.
func (p *profiler) save(ctx context.Context, path, phase, kind string) error {
	body, err := p.server.getOK(ctx, path)
	if err != nil {
		return err
	}
	file := fmt.Sprintf("%s-%d-%s-%s.pprof", p.server.kind.name, p.round, phase, kind)
	return os.WriteFile(filepath.Join(p.dir, file), []byte(body), 0o644)
}
