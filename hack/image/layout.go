package main

import (
	"os"

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
