package main

import (
	"cmp"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// printHeader prints what the run measures and on what: the machine, the
// binaries' versions, the commit and the options.
func (b *bench) printHeader() {
	o := b.opts
	w := b.out
	fmt.Fprintf(w, "benchcompare %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "command: %s\n", commandLine())
	fmt.Fprintf(w, "machine: %s\n", machine())
	fmt.Fprintf(w, "load average at start: %s\n", loadAverage())
	fmt.Fprintf(w, "harness: %s\n", runtime.Version())
	fmt.Fprintf(w, "commit: %s\n", gitCommit(b.root))
	for _, bin := range []string{env.ServerBinary, cluster.MetricsServerBinary} {
		fmt.Fprintf(w, "binary %s (copied at start): %s\n", bin, binaryVersion(filepath.Join(b.serverDir, bin)))
	}
	for _, bin := range []string{cluster.APIServerBinary, cluster.EtcdBinary, cluster.KwokBinary} {
		fmt.Fprintf(w, "binary %s: %s\n", bin, binaryVersion(filepath.Join(b.binDir, bin)))
	}
	fmt.Fprintf(w, "%s --version: %s\n", env.ServerBinary, serverVersion(filepath.Join(b.serverDir, env.ServerBinary)))
	fmt.Fprintf(w, "workload: %d nodes x %d pods = %d pods (%d containers each) in %d namespaces, apps of %d pods\n",
		o.Nodes, o.PodsPerNode, o.totalPods(), o.Containers, o.Namespaces, o.PodsPerApp)
	fmt.Fprintf(w, "servers: --metric-resolution=%v --kubelet-request-timeout=%v; rounds %d each (metrics-server first in each pair), warm-up %d cycles, window %d cycles\n",
		o.Resolution, o.RequestTimeout, o.Rounds, o.WarmupCycles, o.WindowCycles)
	fmt.Fprintf(w, "probes: %d new pods per round; list load: %d clients, %v or %d requests per shape, JSON, HTTP/2, straight to each server's port\n\n",
		o.Probes, o.Clients, o.LoadDuration, o.LoadMaxRequests)
}

// commandLine is how the harness was started: the BENCH_ variables it
// reads, if set, and its arguments (go run names a temporary binary, so the
// program's name is written as the package).
func commandLine() string {
	var parts []string
	for _, v := range []string{"BENCH_NODES", "BENCH_PODS", "BENCH_ROUNDS"} {
		if x, ok := os.LookupEnv(v); ok {
			parts = append(parts, v+"="+x)
		}
	}
	parts = append(parts, "go run ./test/benchcompare")
	return strings.Join(append(parts, os.Args[1:]...), " ")
}

// machine is the CPU model, the number of cores, the RAM and the kernel.
func machine() string {
	model, ram := "", "unknown"
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			model = cpus[0].ModelName
		}
		if mem, err := fs.Meminfo(); err == nil && mem.MemTotal != nil {
			ram = fmt.Sprintf("%.1f GiB", float64(*mem.MemTotal)/(1<<20))
		}
	}
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%s, %d cores, %s RAM, %s", cmp.Or(model, "unknown CPU"), runtime.NumCPU(), ram,
		strings.TrimSpace("Linux "+string(release)))
}

// loadAverage is the 1, 5 and 15 minute load average: other work on the
// machine shares its cores with the processes measured.
func loadAverage() string {
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if l, err := fs.LoadAvg(); err == nil {
			return fmt.Sprintf("%.2f %.2f %.2f", l.Load1, l.Load5, l.Load15)
		}
	}
	return "unknown"
}

func serverVersion(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// gitCommit is the checked-out commit, marked dirty when the work tree has
// changes to tracked files.
func gitCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		commit += " (with uncommitted changes)"
	}
	return commit
}

// binaryVersion describes a Go binary: the module it was built from, its
// version, the commit for a binary built in a checkout, and the Go version.
func binaryVersion(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	mod := bi.Main.Path + " " + bi.Main.Version
	// Tools built from a tools module name the real module as a dependency.
	for _, d := range bi.Deps {
		if strings.HasPrefix(bi.Path, d.Path+"/") || bi.Path == d.Path {
			mod = d.Path + " " + d.Version
		}
	}
	var vcs []string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			vcs = append(vcs, "commit "+s.Value)
		case "vcs.modified":
			if s.Value == "true" {
				vcs = append(vcs, "modified")
			}
		case "vcs.time":
			vcs = append(vcs, s.Value)
		}
	}
	if len(vcs) > 0 {
		mod += " (" + strings.Join(vcs, ", ") + ")"
	}
	return mod + ", " + bi.GoVersion
}

// cpuSeconds returns the user plus system CPU time of process pid (all its
// threads), from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	stat, err := ofProc(procfs.DefaultMountPoint, pid, procfs.Proc.Stat)
	return stat.CPUTime(), err
}

// readMemory reads VmRSS (now), VmHWM (the highest VmRSS so far), and
// RssAnon and RssFile, which split VmRSS into the heap, stacks and runtime,
// and the pages of mapped files (the binary's text and data), from
// /proc/<pid>/status.
func readMemory(pid int) (procfs.ProcStatus, error) { return readStatus(procfs.DefaultMountPoint, pid) }

func readStatus(mount string, pid int) (procfs.ProcStatus, error) {
	status, err := ofProc(mount, pid, procfs.Proc.NewStatus)
	if err == nil && status.VmHWM == 0 {
		err = fmt.Errorf("status of %d has no VmRSS or VmHWM (a kernel thread or a zombie?)", pid)
	}
	return status, err
}

// ofProc reads a file of process pid with read, from the proc file
// system mounted at mount.
func ofProc[T any](mount string, pid int, read func(procfs.Proc) (T, error)) (T, error) {
	fs, err := procfs.NewFS(mount)
	if err != nil {
		return *new(T), err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return *new(T), err
	}
	return read(p)
}
