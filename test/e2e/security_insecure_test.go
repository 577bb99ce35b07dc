//go:build e2e

package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// insecureKubeletFlag turns off verification of kubelet serving
// certificates. It may appear in one manifest only: the development
// component insecureKubeletComponent (for kind and minikube, whose kubelets
// serve self-signed certificates), and in the server's arguments only of
// kustomizations that include that component.
const (
	insecureKubeletFlag      = "--kubelet-insecure-tls"
	insecureKubeletComponent = "manifests/components/insecure-kubelet-tls"
)

// usesInsecureKubeletComponent reports whether the kustomization in dir
// (relative to root) lists the development component among its components.
func usesInsecureKubeletComponent(t *testing.T, root, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, dir, "kustomization.yaml"))
	must(t, err)
	var k struct {
		Components []string `json:"components"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return slices.ContainsFunc(k.Components, func(c string) bool {
		return filepath.Clean(filepath.Join(dir, c)) == insecureKubeletComponent
	})
}

// checkInsecureKubeletFlagConfined fails for every file under manifests/
// outside the development component that names the flag, and when the
// component itself no longer does.
func checkInsecureKubeletFlagConfined(t *testing.T, root string) {
	t.Helper()
	inComponent := false
	must(t, filepath.WalkDir(filepath.Join(root, "manifests"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte(insecureKubeletFlag)) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.Dir(rel) == insecureKubeletComponent {
			inComponent = true
			return nil
		}
		t.Errorf("%s names %s; only %s may", rel, insecureKubeletFlag, insecureKubeletComponent)
		return nil
	}))
	if !inComponent {
		t.Errorf("%s does not set %s", insecureKubeletComponent, insecureKubeletFlag)
	}
}
