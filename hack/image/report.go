package main

import (
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// report prints the index digest, then per platform the manifest digest
// and the image size (config, manifest and compressed layers: what a node
// pulls).
func report(out io.Writer, ref name.Tag, idx v1.ImageIndex) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "image %s@%s\n", ref, d)
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		size, err := imageSize(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s/%s %s %d bytes\n", desc.Platform.OS, desc.Platform.Architecture, desc.Digest, size)
	}
	return nil
}

func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	total := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	return total, nil
}
