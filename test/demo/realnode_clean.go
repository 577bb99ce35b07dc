package main

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

// cleanUpRealNodes removes what a real node of a demo that died left on
// the machine, for each node directory under <clusterDir>/nodes: the
// RealNode.Stop that would have done it needs the RealNode value, which
// died with the demo. It does what Stop does after stopping containerd
// (test/cluster node_stop.go), finding everything from the directory:
//   - kills containerd (--config), the kubelet (--config) and the runtime
//     shims (-address, the node's containerd socket) that name a path in
//     it: the shims outlive the demo by design; removes the shims' sockets;
//   - force-deletes every container runc still knows in the node's runc
//     root, which kills the containers' processes and removes their
//     cgroups, then the CRI's parent cgroup /k8s.io and containerd's
//     /run/containerd/s where they are empty;
//   - unmounts everything under the directory (network namespaces,
//     /dev/shm, rootfs, volumes), the deepest first;
//   - deletes the bridge its CNI configuration names;
//   - removes the kubelet's links to its pod logs in /var/log/containers.
//
// It prints what it removed; with nothing left it prints nothing. Safe to
// run on a directory whose node stopped cleanly.
func cleanUpRealNodes(clusterDir string) error {
	dirs, err := filepath.Glob(filepath.Join(clusterDir, "nodes", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		errs = append(errs, cleanUpRealNode(d))
	}
	return errors.Join(errs...)
}

func cleanUpRealNode(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var did []string
	pids, err := pidsNaming(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	if len(pids) > 0 {
		did = append(did, fmt.Sprintf("%d processes", len(pids)))
	}
	// A shim removes its socket when it exits, but not when killed.
	if n := removeShimSockets(dir); n > 0 {
		did = append(did, fmt.Sprintf("%d shim sockets", n))
	}
	n, err := deleteRuncContainers(ctx, filepath.Join(dir, "containerd", "runc", "k8s.io"))
	errs = append(errs, err)
	if n > 0 {
		did = append(did, fmt.Sprintf("%d containers", n))
	}
	// The CRI's parent cgroup and containerd's /run directories are the
	// machine's, not the node's: they go only after a node that had
	// something running, and only when empty.
	if len(pids)+n > 0 {
		parents, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
		for _, p := range append(parents, "/run/containerd/s", "/run/containerd") {
			_ = syscall.Rmdir(p)
		}
	}
	n, err = unmountUnder(dir)
	errs = append(errs, err)
	if n > 0 {
		did = append(did, fmt.Sprintf("%d mounts", n))
	}
	bridge, err := deleteNodeBridge(ctx, filepath.Join(dir, "cni", "net.d"))
	errs = append(errs, err)
	if bridge != "" {
		did = append(did, "bridge "+bridge)
	}
	errs = append(errs, removeLogLinks(dir))
	if len(did) > 0 {
		fmt.Printf("Removed what the real node in %s left: %s\n", dir, strings.Join(did, ", "))
	}
	return errors.Join(errs...)
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
// containerd 1.6's fixed /run/containerd/s: each shim writes its socket's
// address to the file address in its bundle, under the node's containerd
// state (containerd v1.6.20 runtime/v2/runc/manager/manager_linux.go,
// Start). It returns how many it removed.
func removeShimSockets(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
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
// runc root and returns how many it deleted.
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
		p := unescapeOctal(fields[4])
		if strings.HasPrefix(p, dir+"/") && !slices.Contains(points, p) {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points, sc.Err()
}

func unescapeOctal(s string) string {
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

// deleteNodeBridge deletes the bridge the node's CNI configuration names,
// if it exists, and returns its name then.
func deleteNodeBridge(ctx context.Context, confDir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(confDir, "*.conflist"))
	if err != nil || len(files) == 0 {
		return "", err
	}
	var bridge string
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
			if p.Type != "bridge" || p.Bridge == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join("/sys/class/net", p.Bridge)); err != nil {
				continue
			}
			if out, err := exec.CommandContext(ctx, "ip", "link", "delete", p.Bridge).CombinedOutput(); err != nil {
				return "", fmt.Errorf("ip link delete %s: %w: %s", p.Bridge, err, strings.TrimSpace(string(out)))
			}
			bridge = p.Bridge
		}
	}
	return bridge, nil
}

// removeLogLinks removes the links the kubelet made in /var/log/containers
// to pod logs under dir.
func removeLogLinks(dir string) error {
	const links = "/var/log/containers"
	entries, err := os.ReadDir(links)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(links, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
			errs = append(errs, os.Remove(p))
		}
	}
	return errors.Join(errs...)
}
