package main

import (
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
