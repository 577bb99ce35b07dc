package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// BinaryPath is where the binary sits in the image, and the entrypoint.
	BinaryPath = "/group-metrics-server"
	// User is distroless's nonroot user and group, numeric so that the
	// image needs no /etc/passwd and the kubelet can check runAsNonRoot.
	User = "65532:65532"
)

// Platform is one architecture's binary.
type Platform struct {
	OS, Architecture string
	// Binary is the path of a static binary (CGO_ENABLED=0) built for it.
	Binary string
}

// Spec is what the image is made of.
type Spec struct {
	Platforms []Platform
	// Created is the time of every file and of the image: the commit time
	// or SOURCE_DATE_EPOCH, so that the same commit builds the same digest.
	Created time.Time
	// Source, Revision and Version become the OCI labels
	// org.opencontainers.image.source, .revision and .version.
	Source, Revision, Version string
}

// Labels are the OCI annotation keys the image config carries as labels
// (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   s.Source,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.created":  s.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.title":    "group-metrics-server",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

// Build returns the multi-platform OCI index: per platform, one layer with
// the binary alone (no shell, no package manager, nothing to write to), the
// nonroot user, the binary as entrypoint and the labels.
func Build(s Spec) (v1.ImageIndex, error) {
	if len(s.Platforms) == 0 {
		return nil, fmt.Errorf("no platform to build")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range s.Platforms {
		img, err := platformImage(s, p)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}},
		})
	}
	return idx, nil
}

func platformImage(s Spec, p Platform) (v1.Image, error) {
	layer, err := binaryLayer(p.Binary, s.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "hack/image: " + BinaryPath, Comment: s.Version},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = p.OS, p.Architecture
	cfg.Created = created
	cfg.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/",
		Labels:     s.Labels(),
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return img, nil
}

// binaryLayer is a gzipped tar of one file, root-owned and executable by
// anyone (the image runs as 65532), dated at created.
func binaryLayer(path string, created time.Time) (v1.Layer, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     BinaryPath[1:],
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  created.UTC(),
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
