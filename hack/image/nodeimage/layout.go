package main

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeLayout writes imgs into a new OCI layout in dir, one index entry
// each, named for containerd by io.containerd.image.name (containerd's
// client/import.go reads that annotation first) and with its platform, so
// an import needs no --all-platforms.
func writeLayout(dir string, s Spec, imgs []v1.Image) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for i, img := range imgs {
		err := p.AppendImage(img,
			layout.WithAnnotations(map[string]string{"io.containerd.image.name": s.Images[i].Name}),
			layout.WithPlatform(v1.Platform{OS: s.OS, Architecture: s.Architecture}))
		if err != nil {
			return err
		}
	}
	return nil
}

// tarLayout writes the regular files under dir to a tar at path in name
// order, dated at created, so one layout gives the same bytes each time.
func tarLayout(dir, path string, created time.Time) (err error) {
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
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)),
		ModTime: created.UTC(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}
