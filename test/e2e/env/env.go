// Package env deploys group-metrics-server onto a local control plane from
// test/cluster, next to a fake kubelet fleet, for the e2e suite and the demo.
// It applies the objects of manifests/base as users do, changing only what a
// server running on 127.0.0.1 instead of in a pod forces.
package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// ServerBinary is the name of the server binary in the bin directory.
const ServerBinary = "group-metrics-server"

// RepoRoot returns the directory holding the main module's go.mod, searched
// upwards from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/group-metrics-server/group-metrics-server\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (go.mod of the main module) above the working directory")
		}
		dir = parent
	}
}

// BinDir returns $GMS_BIN_DIR, or <repo>/bin.
func BinDir() (string, error) {
	if dir := os.Getenv("GMS_BIN_DIR"); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// kubeVersionEnv picks another Kubernetes release for the control plane:
// with GMS_K8S_VERSION=v1.35.4 the kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl come from <bin>/k8s-v1.35.4/, which
// hack/tools-k8s.sh builds (make e2e-compat).
const kubeVersionEnv = "GMS_K8S_VERSION"

// KubeBinDir returns the directory of the release $GMS_K8S_VERSION names
// under binDir and that release, or two empty strings when it is unset.
func KubeBinDir(binDir string) (dir, version string, err error) {
	version = os.Getenv(kubeVersionEnv)
	if version == "" {
		return "", "", nil
	}
	if !kubeVersionRE.MatchString(version) {
		return "", "", fmt.Errorf("%s=%q is not a release such as v1.35.4", kubeVersionEnv, version)
	}
	dir = filepath.Join(binDir, "k8s-"+version)
	if err := CheckBinaries(dir, cluster.APIServerBinary, cluster.ControllerManagerBinary, cluster.SchedulerBinary, cluster.KubectlBinary); err != nil {
		return "", "", fmt.Errorf("%s=%s: %w (run `hack/tools-k8s.sh %s`)", kubeVersionEnv, version, err, version)
	}
	return dir, version, nil
}

var kubeVersionRE = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)

// CheckBinaries reports every binary of names missing from dir, with the make
// target that builds it.
func CheckBinaries(dir string, names ...string) error {
	var errs []error
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			hint := "make tools"
			if n == ServerBinary {
				hint = "make build"
			}
			errs = append(errs, fmt.Errorf("%w (run `%s` or set GMS_BIN_DIR)", err, hint))
		}
	}
	return errors.Join(errs...)
}

// Render returns the objects of the kustomization in dir, as rendered by
// `kubectl kustomize`, in order.
func Render(ctx context.Context, c *cluster.Cluster, dir string) ([]*unstructured.Unstructured, error) {
	out, _, err := c.Kubectl(ctx, "kustomize", dir)
	if err != nil {
		return nil, err
	}
	return chart.Decode(strings.NewReader(out))
}

// Apply writes objs as one List under <workdir>/manifests/<name>.json and
// applies it with kubectl, server-side, as a user applying manifests would;
// flags are added to kubectl apply's (--force-conflicts, or
// --server-side=false for a client-side apply).
func Apply(ctx context.Context, c *cluster.Cluster, name string, objs []*unstructured.Unstructured, flags ...string) error {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		items = append(items, o.Object)
	}
	data, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(c.WorkDir(), "manifests", name+".json")
	if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		return err
	}
	args := append([]string{"apply", "--server-side", "--field-manager=gms-e2e"}, flags...)
	_, _, err = c.Kubectl(ctx, append(args, "-f", path)...)
	return err
}

// find returns the object of kind named name in objs, or with name "" the
// only object of kind.
func find(objs []*unstructured.Unstructured, kind, name string) (*unstructured.Unstructured, error) {
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			if found != nil {
				return nil, fmt.Errorf("manifests hold more than one %s", kind)
			}
			found = o
		}
	}
	if found == nil {
		return nil, fmt.Errorf("manifests hold no %s %s", kind, name)
	}
	return found, nil
}

// container returns the container named name of a Deployment's pod
// template, and the template's pod spec; the pod runs as the spec's
// ServiceAccountName or, if that is empty, default.
func container(deploy *unstructured.Unstructured, name string) (*corev1.Container, *corev1.PodSpec, error) {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deploy.Object, &d); err != nil {
		return nil, nil, fmt.Errorf("deployment %s: %w", deploy.GetName(), err)
	}
	spec := &d.Spec.Template.Spec
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i], spec, nil
		}
	}
	return nil, nil, fmt.Errorf("deployment %s has no container %s", deploy.GetName(), name)
}
