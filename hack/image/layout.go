package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations on the layout's index.json entry. containerd names an
// imported image by io.containerd.image.name, else by
// org.opencontainers.image.ref.name (client/import.go, imageName, in
// containerd/containerd); the OCI convention is the tag alone in the
// latter.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// writeLayout replaces dir with an OCI layout holding idx under ref.
func writeLayout(dir string, ref name.Tag, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationContainerdName: ref.String(),
		annotationRefName:        ref.TagStr(),
	}))
}

// tarLayout writes the layout in dir as a tar: regular files only, in name
// order, root-owned, dated at created, so that the same layout gives the
// same bytes. containerd's importer (core/images/archive/importer.go)
// reads such a tar as an OCI layout because it holds oci-layout; kind's
// `load image-archive` pipes the file to `ctr images import
// --all-platforms` on each node.
func tarLayout(dir, path string, created time.Time) (err error) {
	var files []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(files)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	for _, p := range files {
		if err := addFile(tw, dir, p, created); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, dir, p string, created time.Time) error {
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     filepath.ToSlash(rel),
		Mode:     0o644,
		Size:     st.Size(),
		ModTime:  created.UTC(),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}
