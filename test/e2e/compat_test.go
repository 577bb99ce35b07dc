//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// defaultKubeVersion is the release hack/tools.sh builds into bin/.
const defaultKubeVersion = "v1.37.2"

// TestControlPlaneRelease checks that the suite runs on the release it was asked for
// ($GMS_K8S_VERSION, or the one in bin/).
func TestControlPlaneRelease(t *testing.T) {
	ctx := begin(t, time.Minute)
	want := cmp.Or(suite.kubeVersion, defaultKubeVersion)
	checkVersions(ctx, t)
	kcm, err := exec.CommandContext(ctx, suite.cluster.BinaryPath(cluster.ControllerManagerBinary), "--version").Output()
	if err != nil {
		t.Fatalf("kube-controller-manager --version: %v", err)
	}
	if got := strings.TrimSpace(string(kcm)); got != "Kubernetes "+want {
		t.Errorf("kube-controller-manager --version = %q, want %q", got, "Kubernetes "+want)
	}
	for _, name := range suite.server.APIServices {
		if err := suite.cluster.WaitForAPIServiceAvailable(ctx, name); err != nil {
			t.Error(err)
		}
	}
	t.Logf("control plane %s: kubectl, kube-apiserver and kube-controller-manager report it, APIServices %v Available", want, suite.server.APIServices)
}

// kubectlMetricsVersion is the metrics.k8s.io version the suite's kubectl
// top asks for: kubectl's pkg/cmd/top/top.go lists supportedMetricsAPIVersions
// "v1", "v1beta1" from v1.37 and only "v1beta1" before (k8s.io/kubectl
// v0.35.4 and v0.36.3).
func kubectlMetricsVersion(t *testing.T) string {
	t.Helper()
	v := cmp.Or(suite.kubeVersion, defaultKubeVersion)
	var minor, patch int
	if _, err := fmt.Sscanf(v, "v1.%d.%d", &minor, &patch); err != nil {
		t.Fatalf("release %q: %v", v, err)
	}
	if minor < 37 {
		return "v1beta1"
	}
	return "v1"
}

// helpFlag matches a flag line of a cobra/pflag --help: "  -l, --node-selector string   ...".
var helpFlag = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: ([A-Za-z0-9=,.]+))?(?:\s{2,}|$)`)

// TestMetricsServerFlagList checks hack/metrics-server-v0.8.0-flags.txt against the
// flags metrics-server v0.8.0 itself lists.
func TestMetricsServerFlagList(t *testing.T) {
	ctx := begin(t, time.Minute)
	data := readFile(t, repoPath(t, "hack", "metrics-server-v0.8.0-flags.txt"))
	var listed, got []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(l, "#") {
			listed = append(listed, l)
		}
	}
	out, err := exec.CommandContext(ctx, filepath.Join(suite.binDir, cluster.MetricsServerBinary), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("metrics-server --help: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			got = append(got, strings.TrimSpace(m[1]+" "+m[2]))
		}
	}
	sort.Strings(got)
	if diff := gocmp.Diff(listed, got); diff != "" {
		t.Errorf("hack/metrics-server-v0.8.0-flags.txt against metrics-server --help (-file +binary):\n%s", diff)
	}
}
