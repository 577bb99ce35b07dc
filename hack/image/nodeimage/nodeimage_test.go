package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/hack/image/internal/ocitar"
)

// TestLayout builds the layout twice from a stand-in busybox and checks
// what containerd's import reads: one index entry a name, each named by
// io.containerd.image.name with its platform, and the same bytes both
// times. That the images run is the real node's e2e test (make e2e-node).
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	busybox := filepath.Join(dir, "busybox")
	if err := os.WriteFile(busybox, []byte("not a real busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Busybox: busybox, Applets: []string{"sh", "yes", "busybox", "../escape"}, OS: "linux", Architecture: "amd64",
		Created: time.Unix(0, 0).UTC(), Images: images}
	var tars [2][]byte
	for i := range tars {
		layout, path := filepath.Join(dir, "layout", string(rune('a'+i))), filepath.Join(dir, "images.tar")
		imgs, err := Build(spec)
		if err == nil {
			err = writeLayout(layout, spec, imgs)
		}
		if err == nil {
			err = ocitar.Write(layout, path, spec.Created)
		}
		if err == nil {
			tars[i], err = os.ReadFile(path)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Error("two builds of one spec wrote different tars")
	}

	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
			Platform    struct{ OS, Architecture string }
		} `json:"manifests"`
	}
	if err := json.Unmarshal(tarFile(t, tars[0], "index.json"), &index); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, m := range index.Manifests {
		got = append(got, m.Annotations["io.containerd.image.name"]+" "+m.Platform.OS+"/"+m.Platform.Architecture)
	}
	for _, im := range images {
		want = append(want, im.Name+" linux/amd64")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("index entries (-want +got):\n%s", diff)
	}
}

// tarFile returns the file name from the tar in data.
func tarFile(t *testing.T, data []byte, name string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in the tar", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
