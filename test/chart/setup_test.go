//go:build chart

package chart_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// chartOnlyLabels are the labels the chart adds to every object's metadata
// that manifests/ has not: they say which release and chart made it.
var chartOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// testChart is what every test of the chart needs: the repository, the
// chart, bin/helm and bin/kubectl (make tools).
type testChart struct {
	root, chartDir, kubectl string
	helm                    chart.Helm
}

func setup(t *testing.T) testChart {
	t.Helper()
	root, errRoot := env.RepoRoot()
	bin, errBin := env.BinDir()
	if err := errors.Join(errRoot, errBin, env.CheckBinaries(bin, chart.HelmBinary, cluster.KubectlBinary)); err != nil {
		t.Fatal(err)
	}
	return testChart{
		root:     root,
		chartDir: chart.Dir(root),
		kubectl:  filepath.Join(bin, cluster.KubectlBinary),
		helm:     chart.Helm{Binary: filepath.Join(bin, chart.HelmBinary), Home: t.TempDir()},
	}
}

// exampleValues returns the names of the values files under the chart's
// ci/, each documented for users and each linted and rendered here.
func (tc testChart) exampleValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(tc.chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("want the chart's example values files under ci/, found %v", files)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	sort.Strings(files)
	return files
}

// run runs bin/helm with args and the chart, in kube-system, with the values file named
// under ci/ ("" for the defaults) and the --set flags given.
func (tc testChart) run(t *testing.T, values string, sets []string, args ...string) (string, error) {
	args = append(args, tc.chartDir, "--namespace", "kube-system")
	if values != "" {
		args = append(args, "--values", filepath.Join(tc.chartDir, "ci", values))
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return tc.helm.Run(ctx, args...)
}

// template renders the chart as release chart.Name (see run).
func (tc testChart) template(t *testing.T, values string, sets ...string) ([]*unstructured.Unstructured, error) {
	out, err := tc.run(t, values, sets, "template", chart.Name)
	if err != nil {
		return nil, err
	}
	return chart.Decode(strings.NewReader(out))
}

// render is template, failing the test on an error.
func (tc testChart) render(t *testing.T, values string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := tc.template(t, values, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// kustomize renders the kustomization dir (under the repository root) with
// kubectl kustomize.
func (tc testChart) kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.kubectl, "kustomize", filepath.Join(tc.root, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	objs, err := chart.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return objs
}

// sameAsKustomize renders the chart with the values file named under ci/
// ("" for the defaults) and the kustomization, hands each side's objects to
// normalise (when not nil), and fails unless they are the same set, equal
// but for chartOnlyLabels in their metadata (only there: selectors and pod
// labels are the same in both).
func (tc testChart) sameAsKustomize(t *testing.T, values, kustomization string, normalise func(side string, objs []*unstructured.Unstructured)) {
	t.Helper()
	fromChart := tc.render(t, values)
	fromKustomize := tc.kustomize(t, kustomization)
	if normalise != nil {
		normalise("chart", fromChart)
		normalise("kustomize", fromKustomize)
	}
	want, got := byKey(t, kustomization, fromKustomize), byKey(t, "chart", fromChart)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chart with values %q differs from kubectl kustomize %s (-kustomize +chart):\n%s", values, kustomization, diff)
	}
	t.Logf("values %q: %d objects, equal to %s's", values, len(fromChart), kustomization)
}

// byKey keys objs by chart.Key, without chartOnlyLabels.
func byKey(t *testing.T, what string, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := make(map[string]map[string]any, len(objs))
	for _, o := range objs {
		for _, l := range chartOnlyLabels {
			unstructured.RemoveNestedField(o.Object, "metadata", "labels", l)
		}
		if len(o.GetLabels()) == 0 {
			unstructured.RemoveNestedField(o.Object, "metadata", "labels")
		}
		k := chart.Key(o)
		if _, dup := out[k]; dup {
			t.Fatalf("%s: two objects %s", what, k)
		}
		out[k] = o.Object
	}
	return out
}

// refusal is values helm template must refuse with an error naming want.
type refusal struct {
	name string
	sets []string
	want string
}

// testRefusals checks that helm template refuses each case's --set flags,
// with an error that names the case's want and each of also.
func (tc testChart) testRefusals(t *testing.T, cases []refusal, also ...string) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tc.template(t, "", c.sets...)
			if err == nil {
				t.Fatalf("helm template --set %v succeeded", c.sets)
			}
			for _, w := range append([]string{c.want}, also...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("helm template --set %v: want an error naming %q, got %v", c.sets, w, err)
				}
			}
		})
	}
}
