package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const (
	testVersion = "v0.0.0-imagetest"
	testRef     = "ghcr.io/group-metrics-server/group-metrics-server:" + testVersion
	versionVar  = "github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app.Version"
)

var testCreated = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// archsFlag names the linux architectures TestImage builds. make test-unit
// builds this machine's alone, a cross build of the whole server being the
// costly part; make verify-image builds both that make image ships.
var archsFlag = flag.String("archs", runtime.GOARCH, "comma-separated linux architectures to build the image for")

// TestImage builds the server for the -archs platforms as make image does,
// runs the builder twice into a temporary directory, and checks what a node
// would run: the index has exactly those platforms, each manifest's config
// has the nonroot user, the entrypoint, its own architecture and the
// labels; each layer holds the static binary alone; the binary for this
// machine, extracted from its layer, prints the version; the two runs write
// the same bytes.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	archs := strings.Split(*archsFlag, ",")
	sort.Strings(archs)
	args := []string{"--image=" + testRef, fmt.Sprintf("--created=%d", testCreated.Unix()),
		"--source=https://github.com/group-metrics-server/group-metrics-server", "--revision=0123abcd", "--version=" + testVersion}
	var wantPlatforms []string
	for _, arch := range archs {
		args = append(args, "--platform=linux/"+arch+"="+buildServer(t, dir, arch))
		wantPlatforms = append(wantPlatforms, "linux/"+arch)
	}
	var tarballs [2][]byte
	for i := range tarballs {
		out := filepath.Join(dir, fmt.Sprint(i))
		var report bytes.Buffer
		if err := run(append(args, "--layout="+filepath.Join(out, "oci"), "--tarball="+filepath.Join(out, "image.tar")), &report); err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d:\n%s", i, report.String())
		var err error
		if tarballs[i], err = os.ReadFile(filepath.Join(out, "image.tar")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(tarballs[0], tarballs[1]) {
		t.Errorf("two builds of the same binaries wrote different tarballs: sha256 %x, %x", sha256.Sum256(tarballs[0]), sha256.Sum256(tarballs[1]))
	}

	idx := openLayout(t, filepath.Join(dir, "0", "oci"))
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		platforms = append(platforms, desc.Platform.OS+"/"+desc.Platform.Architecture)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		bin := checkImage(t, img, desc.Platform)
		if desc.Platform.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
			checkRuns(t, dir, bin)
		}
	}
	sort.Strings(platforms)
	if diff := cmp.Diff(wantPlatforms, platforms); diff != "" {
		t.Errorf("index platforms (-want +got):\n%s", diff)
	}
	checkTarball(t, filepath.Join(dir, "0", "image.tar"), len(archs))
	checkPush(t, args, idx)
}

// checkPush pushes to a registry on loopback, as make image-push does, and
// pulls the index back by tag: the same digest as the layout's.
func checkPush(t *testing.T, args []string, want v1.ImageIndex) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/group-metrics-server:" + testVersion
	var out bytes.Buffer
	if err := run(append(append([]string{"--image=" + ref}, args[1:]...), "--push"), &out); err != nil {
		t.Fatalf("push: %v\n%s", err, out.String())
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	gd, err := got.Digest()
	wd, wantErr := want.Digest()
	if err := errors.Join(err, wantErr); err != nil {
		t.Fatal(err)
	}
	if gd != wd {
		t.Errorf("pushed index %s, pulled back %s", wd, gd)
	}
}

// buildServer builds the server as make image-binaries does.
func buildServer(t *testing.T, dir, arch string) string {
	t.Helper()
	out := filepath.Join(dir, "linux-"+arch, "group-metrics-server")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X "+versionVar+"="+testVersion, "-o", out, "./cmd/group-metrics-server")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build linux/%s: %v\n%s", arch, err, b)
	}
	return out
}

func openLayout(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 {
		t.Fatalf("index.json lists %d entries, want 1", len(tm.Manifests))
	}
	want := map[string]string{annotationContainerdName: testRef, annotationRefName: testVersion}
	if diff := cmp.Diff(want, tm.Manifests[0].Annotations); diff != "" {
		t.Errorf("index.json annotations (-want +got):\n%s", diff)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// checkImage checks one platform's config and layer and returns the
// binary from the layer.
func checkImage(t *testing.T, img v1.Image, plat *v1.Platform) []byte {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"os": cfg.OS, "architecture": cfg.Architecture, "user": cfg.Config.User,
		"entrypoint": cfg.Config.Entrypoint, "cmd": cfg.Config.Cmd, "labels": cfg.Config.Labels,
		"created": cfg.Created.UTC(),
	}
	want := map[string]any{
		"os": plat.OS, "architecture": plat.Architecture, "user": "65532:65532",
		"entrypoint": []string{"/group-metrics-server"}, "cmd": []string(nil),
		"labels": map[string]string{
			"org.opencontainers.image.source":   "https://github.com/group-metrics-server/group-metrics-server",
			"org.opencontainers.image.revision": "0123abcd",
			"org.opencontainers.image.version":  testVersion,
			"org.opencontainers.image.created":  "2026-12-03T12:00:00Z",
			"org.opencontainers.image.title":    "group-metrics-server",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
		"created": testCreated,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s/%s config (-want +got):\n%s", plat.OS, plat.Architecture, diff)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%s: %d layers, want 1", plat.Architecture, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var bin []byte
	readTar(t, rc, func(hdr *tar.Header, data []byte) {
		if hdr.Name != "group-metrics-server" || hdr.Typeflag != tar.TypeReg || hdr.Mode != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(testCreated) {
			t.Errorf("%s layer: unexpected entry %q type %c mode %o uid %d gid %d mtime %s; want the binary alone, root-owned, 0755", plat.Architecture, hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		bin = data
	})
	checkStatic(t, bin, plat.Architecture)
	return bin
}

// checkStatic: an ELF for the architecture without an interpreter, so it
// runs with nothing else in the image.
func checkStatic(t *testing.T, bin []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: the layer's binary is not ELF: %v", arch, err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		t.Errorf("%s binary: machine %s, want %s", arch, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s binary has a program interpreter: not static", arch)
		}
	}
}

// checkRuns runs the binary taken from the layer with --version.
func checkRuns(t *testing.T, dir string, bin []byte) {
	t.Helper()
	p := filepath.Join(dir, "extracted-group-metrics-server")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", p, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != testVersion {
		t.Errorf("--version printed %q, want %q", got, testVersion)
	}
}

// checkTarball: the tar holds oci-layout, index.json and every blob the
// layout holds, each blob's content matching its name.
func checkTarball(t *testing.T, path string, platforms int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen, blobs := map[string]bool{}, 0
	readTar(t, f, func(hdr *tar.Header, data []byte) {
		seen[hdr.Name] = true
		switch {
		case hdr.Name == "oci-layout":
			var l struct {
				Version string `json:"imageLayoutVersion"`
			}
			if err := json.Unmarshal(data, &l); err != nil || l.Version != "1.0.0" {
				t.Errorf("oci-layout = %s (%v), want imageLayoutVersion 1.0.0", data, err)
			}
		case strings.HasPrefix(hdr.Name, "blobs/sha256/"):
			blobs++
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:]); got != strings.TrimPrefix(hdr.Name, "blobs/sha256/") {
				t.Errorf("%s holds content with digest %s", hdr.Name, got)
			}
		case hdr.Name != "index.json":
			t.Errorf("tarball: unexpected entry %s", hdr.Name)
		}
	})
	// The index, and a manifest, a config and a layer a platform.
	if want := 1 + 3*platforms; !seen["oci-layout"] || !seen["index.json"] || blobs != want {
		t.Errorf("tarball has oci-layout %v, index.json %v, %d blobs; want both and %d blobs", seen["oci-layout"], seen["index.json"], blobs, want)
	}
}

// readTar calls fn with each entry of the tar stream r and its content.
func readTar(t *testing.T, r io.Reader, fn func(hdr *tar.Header, data []byte)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fn(hdr, data)
	}
}
