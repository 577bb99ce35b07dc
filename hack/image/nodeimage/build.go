package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is one named image of the layout: the shared busybox layer with
// its own command.
type Image struct {
	// Name is the full reference containerd files the image under
	// (docker.io/library/nginx:1.14.2, not nginx:1.14.2), as the kubelet's
	// normalised image names are.
	Name string
	// Entrypoint and Cmd as in an image config.
	Entrypoint, Cmd []string
}

// Spec is what the layout is made of.
type Spec struct {
	// Busybox is the path of a static busybox; Applets are the names it
	// answers to (busybox --list), each a symlink in /bin.
	Busybox string
	Applets []string
	// OS and Architecture of the busybox, and so of every image.
	OS, Architecture string
	// Created dates every file and image, so one busybox gives one digest.
	Created time.Time
	Images  []Image
}

// pathEnv is the PATH of every image: the applets are all in /bin.
const pathEnv = "PATH=/bin:/sbin:/usr/bin:/usr/sbin"

// Build returns the images of s, in s.Images's order.
func Build(s Spec) ([]v1.Image, error) {
	layer, err := busyboxLayer(s)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	withLayer, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "hack/image/nodeimage: busybox"},
	})
	if err != nil {
		return nil, err
	}
	out := make([]v1.Image, 0, len(s.Images))
	for _, im := range s.Images {
		cfg, err := withLayer.ConfigFile()
		if err != nil {
			return nil, err
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture, cfg.Created = s.OS, s.Architecture, created
		cfg.Config = v1.Config{Env: []string{pathEnv}, Entrypoint: im.Entrypoint, Cmd: im.Cmd, WorkingDir: "/"}
		img, err := mutate.ConfigFile(withLayer, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Name, err)
		}
		out = append(out, img)
	}
	return out, nil
}

// entry is one file of the layer.
type entry struct {
	hdr  tar.Header
	data []byte
}

// busyboxLayer is a gzipped tar holding /bin/busybox, a symlink to it for
// every applet, the directories a shell and httpd expect, /etc/passwd and
// /etc/group with root and nobody, and /www/index.html for httpd.
func busyboxLayer(s Spec) (v1.Layer, error) {
	bin, err := os.ReadFile(s.Busybox)
	if err != nil {
		return nil, err
	}
	dir := func(name string, mode int64) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}}
	}
	file := func(name string, mode int64, data []byte) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
	}
	entries := []entry{
		dir("bin", 0o755), dir("dev", 0o755), dir("etc", 0o755), dir("proc", 0o755), dir("sys", 0o755),
		dir("tmp", 0o1777), dir("var", 0o755), dir("www", 0o755),
		file("bin/busybox", 0o755, bin),
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")),
		file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")),
		file("www/index.html", 0o644, []byte("ok\n")),
	}
	for _, a := range s.Applets {
		if a == "busybox" || a == "" || path.Base(a) != a {
			continue
		}
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.ModTime, e.hdr.Format = s.Created.UTC(), tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// checkStatic returns an error unless the file at path is an ELF
// executable without a program interpreter: one that runs in an image
// with no shared libraries.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (Debian's busybox-static is not)", path)
		}
	}
	return nil
}
