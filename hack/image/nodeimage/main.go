// Command nodeimage builds the images the real node of the e2e suite runs
// (docs/testing.md "A real node") without a registry: a pause image and a
// workload image, both a static busybox with every applet linked in /bin
// (a shell, yes, seq, dd, httpd), the workload image also under the names
// the LeaderWorkerSet project's examples use, so their manifests run
// unchanged. It writes one tar of an OCI layout whose index names every
// image with io.containerd.image.name, for `ctr -n k8s.io images import`.
// make tools-node runs it (hack/tools-node.sh).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/group-metrics-server/group-metrics-server/hack/image/internal/ocitar"
)

// The images. test/cluster's node (node.go, NodePauseImage and
// NodeWorkloadImage) names the first two; the containerd config names the
// pause image as its sandbox image.
var images = []Image{
	// The sandbox's process only holds the pod's namespaces. containerd
	// stops a sandbox with SIGKILL, so a sleep serves as well as a pause.
	{Name: "gms.local/pause:1", Entrypoint: []string{"/bin/sleep", "2147483647"}},
	// The workload image's default command serves HTTP, as nginx's does,
	// and exits on SIGTERM, as nginx does: busybox's httpd installs no
	// handler for it, and a signal without a handler never reaches a
	// container's PID 1, so the kubelet would wait out the pod's grace
	// period (30 s unless the pod says otherwise) and then kill it. Tests
	// give their own commands.
	{Name: "gms.local/workload:1", Cmd: serveHTTP(80)},
	// The LeaderWorkerSet project's HPA guide (sigs.k8s.io/lws
	// site/content/en/docs/examples/hpa.md, v0.9.0).
	{Name: "docker.io/library/nginx:1.14.2", Cmd: serveHTTP(80)},
	// sigs.k8s.io/lws docs/examples/sample/*.yaml (v0.9.0); the
	// unprivileged image listens on 8080.
	{Name: "docker.io/nginxinc/nginx-unprivileged:1.27", Cmd: serveHTTP(8080)},
}

// serveHTTP is a command that serves /www on port until SIGTERM: the shell,
// PID 1, traps the signal, and its wait returns when the signal comes.
func serveHTTP(port int) []string {
	return []string{"sh", "-c", fmt.Sprintf(`trap 'exit 0' TERM; httpd -f -p %d -h /www & wait`, port)}
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nodeimage:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("nodeimage", flag.ContinueOnError)
	busybox := fs.String("busybox", "/bin/busybox", "a static busybox (Debian busybox-static) for this machine's platform")
	tarPath := fs.String("tarball", "", "the tar of the OCI layout to write (required)")
	created := fs.Int64("created", 0, "creation time of every file and image, Unix seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tarPath == "" {
		return fmt.Errorf("--tarball is required")
	}
	if err := checkStatic(*busybox); err != nil {
		return err
	}
	list, err := exec.Command(*busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", *busybox, err)
	}
	spec := Spec{
		Busybox: *busybox, Applets: strings.Fields(string(list)),
		OS: "linux", Architecture: runtime.GOARCH,
		Created: time.Unix(*created, 0).UTC(),
		Images:  images,
	}
	imgs, err := Build(spec)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(*tarPath), ".nodeimage-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := writeLayout(dir, spec, imgs); err != nil {
		return err
	}
	tmp := *tarPath + ".tmp"
	if err := ocitar.Write(dir, tmp, spec.Created); err != nil {
		return err
	}
	if err := os.Rename(tmp, *tarPath); err != nil {
		return err
	}
	for i, img := range imgs {
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s@%s\n", images[i].Name, d)
	}
	return nil
}
