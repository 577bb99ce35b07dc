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
)

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

// CleanUpRealNode removes what a real node left on the machine, working
// from its directory (<cluster work directory>/nodes/<name>) alone: for a
// node whose RealNode died with the process that started it, killed, say.
// It does what Stop does once containerd is gone:
//   - kills containerd (--config), the kubelet (--config) and the runtime
//     shims (-address, the node's containerd socket) that name a path in
//     the directory: the shims outlive containerd by design; removes the
//     shims' sockets, which a killed shim leaves;
//   - force-deletes every container runc still knows in the node's runc
//     root, which kills the containers' processes and removes their
//     cgroups, then the CRI's parent cgroup /k8s.io and containerd's
//     /run/containerd/s where they are empty;
//   - unmounts everything under the directory (network namespaces,
//     /dev/shm, rootfs, volumes), the deepest first;
//   - deletes the bridge the node's CNI configuration names;
//   - removes the kubelet's links to its pod logs in /var/log/containers.
//
// The directory stays, with the logs. It is safe to call on the directory
// of a node that stopped cleanly, and more than once.
func CleanUpRealNode(dir string) (CleanUpReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := nodeDirs{base: filepath.Clean(dir)}
	bridge, err := configuredBridge(d.cniConfDir())
	r, cerr := cleanUpNode(ctx, d, bridge)
	return r, errors.Join(err, cerr)
}

// cleanUpNode is CleanUpRealNode for the node in d whose bridge is bridge
// ("" for none).
func cleanUpNode(ctx context.Context, d nodeDirs, bridge string) (CleanUpReport, error) {
	var r CleanUpReport
	var errs []error
	pids, err := pidsNaming(d.base)
	errs = append(errs, err)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			continue
		}
		r.Processes++
	}
	// A shim removes its socket when it exits, but not when killed.
	r.ShimSockets = removeShimSockets(d.containerdState())
	r.Containers, err = deleteRuncContainers(ctx, filepath.Join(d.runcRoot(), "k8s.io"))
	errs = append(errs, err)
	// The CRI's parent cgroup and containerd's /run directories are the
	// machine's, not the node's: rmdir removes them only when empty, and
	// one another node on the machine uses stays.
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	for _, p := range append(parents, "/run/containerd/s", "/run/containerd") {
		_ = syscall.Rmdir(p)
	}
	r.Mounts, err = unmountUnder(d.base)
	errs = append(errs, err)
	if bridge != "" {
		deleted, err := deleteBridge(ctx, bridge)
		errs = append(errs, err)
		if deleted {
			r.Bridge = bridge
		}
	}
	r.LogLinks, err = removeLogLinks(d.podLogs())
	errs = append(errs, err)
	return r, errors.Join(errs...)
}

// nodeCommands are the programs of a real node that pidsNaming finds.
var nodeCommands = []string{"containerd", "kubelet", "containerd-shim-runc-v2"}

// pidsNaming returns the processes running one of nodeCommands with an
// argument (or a flag's value, --flag=value) that is a path under dir;
// a user's `tail -f` of a pod log there is left alone.
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
		if !slices.Contains(nodeCommands, filepath.Base(args[0])) {
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
// SocketAddress): each shim writes its socket's address to the file
// address in its bundle, under the node's containerd state (containerd
// v1.6.20 runtime/v2/runc/manager/manager_linux.go, Start). It returns how
// many it removed.
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
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
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
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err == nil {
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
		// Field 5 is the mount point, with spaces and such octal-escaped
		// (proc(5)).
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if strings.HasPrefix(p, dir+"/") && !slices.Contains(points, p) {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points, sc.Err()
}

func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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

// deleteBridge deletes the bridge, which the bridge plugin created with the
// first pod, if it exists, and says whether it did; the pods' veth pairs
// went with their network namespaces.
func deleteBridge(ctx context.Context, bridge string) (bool, error) {
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err != nil {
		return false, nil
	}
	if out, err := exec.CommandContext(ctx, "ip", "link", "delete", bridge).CombinedOutput(); err != nil {
		return false, fmt.Errorf("ip link delete %s: %w: %s", bridge, err, strings.TrimSpace(string(out)))
	}
	return true, nil
}

// removeLogLinks removes the links the kubelet makes in /var/log/containers
// (a fixed path) to the pod logs in podLogs and returns how many it
// removed.
func removeLogLinks(podLogs string) (int, error) {
	const dir = "/var/log/containers"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil
	}
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
