package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Stop stops the node and leaves nothing of it running or mounted: the
// kubelet first, so that nothing starts containers again; every container
// and sandbox, through ctr; containerd; then what CleanUpRealNode removes.
// It deletes the Node object too, so the cluster keeps no NotReady node. The
// node's directory stays, with the logs. It is safe to call more than once.
func (n *RealNode) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.Stop())
	}
	if n.containerd != nil && !n.containerd.exited() {
		errs = append(errs, n.removeContainers(ctx), n.containerd.Stop())
	}
	// What is left (the shims and their sockets, when containerd died
	// first, say) goes as for a node whose RealNode died.
	_, err := cleanUpNode(ctx, n.dirs, n.bridge)
	errs = append(errs, err)
	// A cluster that is stopping (its context ended: an interrupt, say) has
	// no kube-apiserver to delete the Node from, nor a need to.
	n.c.mu.Lock()
	stopping := n.c.stopping
	n.c.mu.Unlock()
	if !stopping {
		if err := n.c.client.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete node %s: %w", n.name, err))
		}
	}
	return errors.Join(errs...)
}

// removeContainers kills and deletes every container of the CRI namespace,
// sandboxes included, with their tasks and snapshots.
func (n *RealNode) removeContainers(ctx context.Context) error {
	out, err := n.Ctr(ctx, "containers", "list", "-q")
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range strings.Fields(out) {
		// A container without a task has nothing to kill.
		_, _ = n.Ctr(ctx, "tasks", "kill", "--all", "--signal=SIGKILL", id)
		// The task can be deleted once its processes have exited.
		gone := func(ctx context.Context) error {
			if out, err := n.Ctr(ctx, "tasks", "delete", "--force", id); err != nil && !strings.Contains(out, "not found") {
				return err
			}
			return nil
		}
		errs = append(errs, PollUntil(ctx, "the task of container "+id+" to exit", 100*time.Millisecond, 10*time.Second, nil, gone))
		if _, err := n.Ctr(ctx, "containers", "delete", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CleanUpReport counts what CleanUpRealNode removed.
type CleanUpReport struct {
	Processes   int    // containerd, the kubelet and the runtime shims
	ShimSockets int    // in /run/containerd/s
	Containers  int    // runc delete --force
	Mounts      int    // under the node's directory
	Bridge      string // the bridge deleted, or ""
	LogLinks    int    // in /var/log/containers
}

// String lists what was removed, "" when nothing was.
func (r CleanUpReport) String() string {
	var did []string
	for _, c := range []struct {
		n    int
		what string
	}{{r.Processes, "processes"}, {r.ShimSockets, "shim sockets"}, {r.Containers, "containers"}, {r.Mounts, "mounts"}} {
		if c.n > 0 {
			did = append(did, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if r.Bridge != "" {
		did = append(did, "bridge "+r.Bridge)
	}
	if r.LogLinks > 0 {
		did = append(did, fmt.Sprintf("%d log links", r.LogLinks))
	}
	return strings.Join(did, ", ")
}

// CleanUpRealNode removes what a real node left on the machine, from its
// directory (<cluster work directory>/nodes/<name>) alone: for a node whose
// RealNode died with the process that started it. It
//   - kills containerd (--config), the kubelet (--config) and the runtime
//     shims (-address, the node's containerd socket) that name a path in the
//     directory: the shims outlive containerd by design; removes the shims'
//     sockets, which a killed shim leaves;
//   - force-deletes every container runc still knows in the node's runc
//     root, which kills their processes and removes their cgroups, then the
//     CRI's parent cgroup /k8s.io and containerd's /run/containerd/s where
//     they are empty;
//   - unmounts everything under the directory (network namespaces,
//     /dev/shm, rootfs, volumes), the deepest first;
//   - deletes the bridge the node's CNI configuration names;
//   - removes the kubelet's links to its pod logs in /var/log/containers.
//
// The directory stays, with the logs. It is safe to call on the directory of
// a node that stopped cleanly, and more than once.
func CleanUpRealNode(dir string) (CleanUpReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := nodeDirs{base: filepath.Clean(dir)}
	bridge, err := configuredBridge(d.cniConfDir())
	r, cerr := cleanUpNode(ctx, d, bridge)
	return r, errors.Join(err, cerr)
}

// cleanUpNode is CleanUpRealNode for the node in d with bridge ("" for none).
func cleanUpNode(ctx context.Context, d nodeDirs, bridge string) (CleanUpReport, error) {
	var r CleanUpReport
	pids, err := pidsNaming(d.base)
	errs := []error{err}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			continue
		}
		r.Processes++
	}
	r.ShimSockets = removeShimSockets(d.containerdState())
	r.Containers, err = deleteRuncContainers(ctx, filepath.Join(d.runcRoot(), "k8s.io"))
	errs = append(errs, err)
	// The CRI's parent cgroup and containerd's /run directories are the
	// machine's: rmdir removes them only when empty, so one another node on
	// the machine uses stays.
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	for _, p := range append(parents, "/run/containerd/s", "/run/containerd") {
		_ = syscall.Rmdir(p)
	}
	r.Mounts, err = unmountUnder(d.base)
	errs = append(errs, err)
	if _, statErr := os.Stat(filepath.Join("/sys/class/net", bridge)); bridge != "" && statErr == nil {
		// The bridge plugin created it with the first pod; the pods' veth
		// pairs went with their network namespaces.
		if out, err := exec.CommandContext(ctx, "ip", "link", "delete", bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", bridge, err, strings.TrimSpace(string(out))))
		} else {
			r.Bridge = bridge
		}
	}
	r.LogLinks, err = removeLogLinks(d.podLogs())
	return r, errors.Join(append(errs, err)...)
}

// pidsNaming returns the processes running containerd, the kubelet or a
// shim with an argument (or a flag's value, --flag=value) that is a path
// under dir; a user's `tail -f` of a pod log there is left alone.
func pidsNaming(dir string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		args := strings.Split(string(cmdline), "\x00")
		if !slices.Contains([]string{"containerd", "kubelet", "containerd-shim-runc-v2"}, filepath.Base(args[0])) {
			continue
		}
		if slices.ContainsFunc(args[1:], func(arg string) bool {
			if strings.HasPrefix(arg, "-") {
				_, arg, _ = strings.Cut(arg, "=")
			}
			return strings.HasPrefix(arg, dir+"/")
		}) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// removeShimSockets removes the sockets of the node's runtime shims, in
// containerd 1.6's fixed /run/containerd/s (runtime/v2/shim/util_unix.go,
// SocketAddress), which a shim removes when it exits but not when killed:
// each shim writes its socket's address to the file address in its bundle,
// under the node's containerd state (containerd v1.6.20
// runtime/v2/runc/manager/manager_linux.go, Start). It returns how many it
// removed.
func removeShimSockets(state string) int {
	files, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*", "address"))
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sock := strings.TrimPrefix(strings.TrimSpace(string(data)), "unix://")
		if filepath.Dir(sock) == "/run/containerd/s" && os.Remove(sock) == nil {
			n++
		}
	}
	return n
}

// deleteRuncContainers runs runc delete --force on every container in the
// runc root and returns how many it deleted. After Stop's removeContainers
// there are none unless containerd or a shim died first.
func deleteRuncContainers(ctx context.Context, root string) (int, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	n := 0
	errs := []error{err}
	for _, e := range entries {
		out, err := exec.CommandContext(ctx, "runc", "--root="+root, "delete", "--force", e.Name()).CombinedOutput()
		switch {
		case err == nil:
			n++
		case !strings.Contains(string(out), "does not exist"):
			errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", e.Name(), err, strings.TrimSpace(string(out))))
		}
	}
	return n, errors.Join(errs...)
}

// unmountUnder unmounts every mount point under dir, the deepest first,
// detaching those still busy, and returns how many it unmounted.
func unmountUnder(dir string) (int, error) {
	n := 0
	for range 5 {
		points, err := mountsUnder(dir)
		if err != nil || len(points) == 0 {
			return n, err
		}
		for _, p := range points {
			if syscall.Unmount(p, syscall.MNT_DETACH) == nil {
				n++
			}
		}
	}
	if points, _ := mountsUnder(dir); len(points) > 0 {
		return n, fmt.Errorf("still mounted: %s", strings.Join(points, " "))
	}
	return n, nil
}

// mountsUnder returns the mount points below dir, the longest paths first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Field 5 is the mount point, octal-escaped (proc(5)).
		if fields := strings.Fields(sc.Text()); len(fields) >= 5 {
			if p := unescapeMountPath(fields[4]); strings.HasPrefix(p, dir+"/") && !slices.Contains(points, p) {
				points = append(points, p)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space,
// \134 for a backslash), which a Go string literal shares.
func unescapeMountPath(s string) string {
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return u
	}
	return s
}

// configuredBridge returns the bridge the node's CNI configuration in
// confDir names, "" without one.
func configuredBridge(confDir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(confDir, "*.conflist"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		var conf struct {
			Plugins []struct{ Type, Bridge string }
		}
		if err := json.Unmarshal(data, &conf); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		for _, p := range conf.Plugins {
			if p.Type == "bridge" && p.Bridge != "" {
				return p.Bridge, nil
			}
		}
	}
	return "", nil
}

// removeLogLinks removes the links the kubelet makes in /var/log/containers
// (a fixed path) to the pod logs in podLogs and returns how many it removed.
func removeLogLinks(podLogs string) (int, error) {
	const dir = "/var/log/containers"
	entries, _ := os.ReadDir(dir)
	n := 0
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, podLogs+"/") {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}
