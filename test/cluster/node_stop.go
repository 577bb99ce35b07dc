package cluster

import (
	"bufio"
	"context"
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
// kubelet first, so that nothing starts containers again; then every
// container and sandbox, through ctr, and whatever of them is left, through
// runc; containerd; the runtime shims containerd started for this node
// (found by its socket on their command lines: they run in process groups
// of their own and outlive containerd by design); every mount under the
// node's directory (the pods' network namespaces, /dev/shm, rootfs and
// volumes); the node's bridge; and the kubelet's links to the pod logs in
// /var/log/containers. The node's directory stays, with the logs. Stop
// deletes the Node object too, so the cluster does not keep a NotReady
// node. It is safe to call more than once.
func (n *RealNode) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.Stop())
	}
	if n.containerd != nil && !n.containerd.exited() {
		errs = append(errs, n.removeContainers(ctx))
		errs = append(errs, n.containerd.Stop())
	}
	errs = append(errs, n.killShims(), n.deleteRuncContainers(ctx), n.removeCgroups(), n.unmountAll(), n.deleteBridge(ctx),
		n.removeLogLinks())
	// The shims' sockets are under a fixed /run/containerd/s in containerd
	// 1.6 (runtime/v2/shim/util_unix.go, SocketAddress); they are gone with
	// the shims, and the directories go when no other containerd uses them.
	for _, d := range []string{"/run/containerd/s", "/run/containerd"} {
		_ = os.Remove(d)
	}
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
		if err := pollTaskGone(ctx, n, id); err != nil {
			errs = append(errs, err)
		}
		if _, err := n.Ctr(ctx, "containers", "delete", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pollTaskGone deletes the task of container id once its processes have
// exited after SIGKILL.
func pollTaskGone(ctx context.Context, n *RealNode, id string) error {
	return PollUntil(ctx, "the task of container "+id+" to exit", 100*time.Millisecond, 10*time.Second, nil, func(ctx context.Context) error {
		out, err := n.Ctr(ctx, "tasks", "delete", "--force", id)
		if err == nil || strings.Contains(out, "not found") {
			return nil
		}
		return err
	})
}

// killShims kills the shims whose command line names this node's
// containerd socket.
func (n *RealNode) killShims() error {
	pids, err := pidsWithArg(n.dirs.containerdSocket())
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// pidsWithArg returns the processes one of whose arguments is arg.
func pidsWithArg(arg string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		if slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// deleteRuncContainers force-deletes every container runc still knows in
// the node's runc root: it kills their processes and removes their
// cgroups. After removeContainers there are none unless containerd or a
// shim died first.
func (n *RealNode) deleteRuncContainers(ctx context.Context) error {
	root := filepath.Join(n.dirs.runcRoot(), "k8s.io")
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		out, err := exec.CommandContext(ctx, "runc", "--root="+root, "delete", "--force", e.Name()).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "does not exist") {
			errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", e.Name(), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// unmountAll unmounts every mount point under the node's directory, the
// deepest first, detaching those still busy.
func (n *RealNode) unmountAll() error {
	var errs []error
	for range 5 {
		points, err := mountsUnder(n.dirs.base)
		if err != nil || len(points) == 0 {
			return err
		}
		errs = errs[:0]
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	if points, _ := mountsUnder(n.dirs.base); len(points) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %s", strings.Join(points, " ")))
	}
	return errors.Join(errs...)
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
		// Field 5 is the mount point, with spaces and such octal-escaped.
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

// removeCgroups removes the cgroup containerd puts the CRI's containers
// in, /k8s.io of every controller's hierarchy (cgroup v1), once runc has
// removed the containers' own below it. rmdir removes only an empty cgroup:
// one in which another node on the machine runs containers stays.
func (n *RealNode) removeCgroups() error {
	parents, err := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	if err != nil {
		return err
	}
	for _, p := range parents {
		_ = syscall.Rmdir(p)
	}
	return nil
}

// deleteBridge deletes the node's bridge, which the bridge plugin created
// with the first pod; the pods' veth pairs went with their network
// namespaces.
func (n *RealNode) deleteBridge(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.bridge)); err != nil {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "ip", "link", "delete", n.bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %w: %s", n.bridge, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeLogLinks removes the links the kubelet makes in
// /var/log/containers (a fixed path) to this node's pod logs.
func (n *RealNode) removeLogLinks() error {
	const dir = "/var/log/containers"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, n.dirs.podLogs()+"/") {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
