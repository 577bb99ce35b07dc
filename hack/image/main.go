// Command image builds the group-metrics-server OCI image without Docker:
// a multi-platform index of static binaries, written as an OCI layout
// directory and as a tar of that layout (what `ctr images import` and
// `kind load image-archive` take), and pushed to a registry when asked.
// `make image` and `make image-push` run it.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/group-metrics-server/group-metrics-server/hack/image/internal/ocitar"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type options struct {
	spec                  Spec
	ref                   string
	layoutDir, tarPath    string
	push                  bool
	platforms             []string
	created               int64
	source, revision, ver string
}

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.Func("platform", "os/arch=path-of-static-binary, repeatable (e.g. linux/amd64=bin/linux-amd64/group-metrics-server)", func(v string) error {
		o.platforms = append(o.platforms, v)
		return nil
	})
	fs.StringVar(&o.ref, "image", "", "image reference, name:tag")
	fs.StringVar(&o.layoutDir, "layout", "", "OCI layout directory to write (replaced)")
	fs.StringVar(&o.tarPath, "tarball", "", "tar of the OCI layout to write, for ctr images import / kind load image-archive")
	fs.BoolVar(&o.push, "push", false, "push the index to the registry of --image (credentials from the Docker config, as crane)")
	fs.Int64Var(&o.created, "created", -1, "creation time in Unix seconds (SOURCE_DATE_EPOCH or the commit time)")
	fs.StringVar(&o.source, "source", "", "org.opencontainers.image.source")
	fs.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision")
	fs.StringVar(&o.ver, "version", "", "org.opencontainers.image.version")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var errs []string
	if o.ref == "" {
		errs = append(errs, "--image is required")
	}
	if o.created < 0 {
		errs = append(errs, "--created is required (Unix seconds)")
	}
	if o.source == "" || o.revision == "" || o.ver == "" {
		errs = append(errs, "--source, --revision and --version are required")
	}
	if o.layoutDir == "" && o.tarPath == "" && !o.push {
		errs = append(errs, "nothing to do: give --layout, --tarball or --push")
	}
	o.spec = Spec{Created: time.Unix(o.created, 0).UTC(), Source: o.source, Revision: o.revision, Version: o.ver}
	for _, p := range o.platforms {
		plat, bin, ok := strings.Cut(p, "=")
		osName, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 || bin == "" || osName == "" || arch == "" {
			errs = append(errs, fmt.Sprintf("--platform %q: want os/arch=path", p))
			continue
		}
		o.spec.Platforms = append(o.spec.Platforms, Platform{OS: osName, Architecture: arch, Binary: bin})
	}
	if len(o.spec.Platforms) == 0 {
		errs = append(errs, "at least one --platform is required")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return o, nil
}

func run(args []string, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(o.ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	idx, err := Build(o.spec)
	if err != nil {
		return err
	}
	if err := report(out, ref, idx); err != nil {
		return err
	}
	if o.layoutDir != "" || o.tarPath != "" {
		dir := o.layoutDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "gms-image-"); err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(dir) }()
		}
		if err := writeLayout(dir, ref, idx); err != nil {
			return fmt.Errorf("write layout %s: %w", dir, err)
		}
		if o.tarPath != "" {
			if err := ocitar.Write(dir, o.tarPath, o.spec.Created); err != nil {
				return fmt.Errorf("write %s: %w", o.tarPath, err)
			}
			if st, err := os.Stat(o.tarPath); err == nil {
				fmt.Fprintf(out, "tarball %s: %d bytes\n", o.tarPath, st.Size())
			}
		}
	}
	if o.push {
		if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Fprintf(out, "pushed %s\n", ref)
	}
	return nil
}
