package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// downTimeout bounds the wait for a running demo to tear itself down.
const downTimeout = 90 * time.Second

// down stops the demo whose pid is in the demo directory, waits for it to
// exit, cleans up a real node a demo that died left, and removes the
// directory.
func down(o options) error {
	if _, _, err := o.paths(); err != nil {
		return err
	}
	if pid, alive := runningPid(o.dir); alive {
		fmt.Printf("Stopping the demo (pid %d) ...\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal pid %d: %w", pid, err)
		}
		deadline := time.Now().Add(downTimeout)
		for alive := true; alive; _, alive = runningPid(o.dir) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d still running after %v", pid, downTimeout)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// A demo that died leaves its real node's containers, shims, mounts
	// and bridge behind; removing the directory while they are mounted
	// there would reach into them.
	if err := cleanUpRealNodes(filepath.Join(o.dir, "cluster")); err != nil {
		return fmt.Errorf("clean up the real node, %s left as it is: %w", o.dir, err)
	}
	if err := os.RemoveAll(o.dir); err != nil {
		return err
	}
	fmt.Printf("Removed %s\n", o.dir)
	return nil
}

// runningPid returns the pid in the demo's pid file and whether that process
// is alive and is a demo.
func runningPid(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return pid, false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err == nil && !strings.Contains(string(cmdline), "demo") {
		return pid, false
	}
	return pid, true
}

// cleanUpRealNodes removes what a real node of a demo that died left on the
// machine (its containers, shims, mounts, bridge and log links), for each
// node directory under <clusterDir>/nodes: RealNode.Stop needs the RealNode
// value, which died with the demo; cluster.CleanUpRealNode needs only the
// directory. It prints what it removed, and nothing when nothing was left,
// as after a node that stopped cleanly.
func cleanUpRealNodes(clusterDir string) error {
	dirs, err := filepath.Glob(filepath.Join(clusterDir, "nodes", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		r, err := cluster.CleanUpRealNode(d)
		errs = append(errs, err)
		if s := r.String(); s != "" {
			fmt.Printf("Removed what the real node in %s left: %s\n", d, s)
		}
	}
	return errors.Join(errs...)
}
