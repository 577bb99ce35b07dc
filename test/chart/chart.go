// Package chart holds what the chart's tests and the e2e suite's install of
// the Helm chart in manifests/charts share: its name, its directory, bin/helm
// and a decoder of rendered manifests (test/lws decodes the LeaderWorkerSet
// release's manifests with it too).
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// Name is the chart's name, and the release name that gives the objects
// the names of manifests/base.
const Name = "group-metrics-server"

// HelmBinary is the name of helm in the bin directory (make tools).
const HelmBinary = "helm"

// Dir returns the chart's directory under the repository root.
func Dir(root string) string { return filepath.Join(root, "manifests", "charts", Name) }

// Helm runs bin/helm with its own configuration and cache directories
// under a directory of its own, so that nothing the user's helm keeps
// (repositories, plugins, registry logins) takes part.
type Helm struct {
	Binary string
	// Home holds helm's config, cache and data directories.
	Home string
	// Kubeconfig is passed to commands that reach a cluster; empty for
	// template and lint.
	Kubeconfig string
}

// Run runs helm with args and returns its standard output; the error
// carries its standard error.
func (h Helm) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.Binary, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"),
	)
	if h.Kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+h.Kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Decode decodes a stream of YAML documents into objects, skipping empty
// ones.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := map[string]any{}
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// Key names an object by kind, namespace and name.
func Key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}
