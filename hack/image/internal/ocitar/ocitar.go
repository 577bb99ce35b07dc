// Package ocitar writes an OCI image layout directory as a reproducible tar,
// the form containerd imports: `ctr images import` (and kind's
// `load image-archive`, which pipes the file to it on each node) reads a tar
// as an OCI layout when it holds oci-layout (containerd
// core/images/archive/importer.go).
package ocitar

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Write writes the regular files under dir to a tar at path: in name order,
// root-owned, mode 0644, dated at created, so that one layout always gives
// the same bytes.
func Write(dir, path string, created time.Time) (err error) {
	var files []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
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
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: st.Size(),
		ModTime: created.UTC(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}
