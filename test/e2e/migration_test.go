//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

const (
	// takeOverBound bounds the time from applying our manifests over
	// metrics-server's to the aggregator serving ours: the controller
	// takes its lease (at once: nobody holds it) and writes the pair and
	// the caBundle in its first sync (under a second); the Secret volume
	// follows within its poll (0.5s here; the kubelet's sync period on a
	// real node); the server is ready after one complete scrape (one
	// --metric-resolution, 5s, plus --kubelet-request-timeout, 3s); the
	// aggregator's availability check follows the APIService change at
	// once and then probes every 30s at worst. So 1 + 0.5 + 8 + 30, about
	// 40s, and 60s with a margin for a loaded machine.
	takeOverBound = 60 * time.Second
	// recreateBound is what the controller promises: a deleted APIService
	// is created again within --sync-period (15s) after it has been
	// missing for --recreate-after (10s), so within 40s.
	recreateBound = time.Minute
	// uninstallBound is how long garbage collection may take to remove what
	// an uninstall leaves to it.
	uninstallBound = time.Minute
	// aggregatorLag bounds how long after an APIService is Available the
	// aggregator's proxy, which follows APIServices through an informer,
	// may still refuse to proxy to it: far above the moment that takes.
	aggregatorLag = 30 * time.Second
)

// ourLabel selects every object of the manifests.
const ourLabel = "app.kubernetes.io/name=group-metrics-server"

// TestMigrationFromMetricsServer installs metrics-server v0.8.0 from its release
// manifests on a cluster of its own, then applies manifests/base over it.
func TestMigrationFromMetricsServer(t *testing.T) {
	ctx := begin(t, 6*time.Minute)
	c, fleet := ownCluster(ctx, t, 1)
	ms, err := env.DeployMetricsServerManifests(ctx, c, suite.binDir, fleet.CAFile, 10*time.Second, suite.timeout)
	must(t, err)
	t.Cleanup(func() { _ = ms.Process.Stop() })
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	must(t, err)
	before := apiService(ctx, t, dyn, env.MetricsAPIServices[0])
	if insecure, _, _ := unstructured.NestedBool(before.Object, "spec", "insecureSkipTLSVerify"); !insecure {
		t.Fatal("metrics-server's manifests did not set insecureSkipTLSVerify: the test does not start where users are")
	}
	agg := aggregatorEndpoint(t, c)
	served := func(sh shape) func(context.Context) error {
		return func(ctx context.Context) error {
			if r := fetch(ctx, agg, sh); r.failed() {
				return errors.New(r.String())
			}
			return nil
		}
	}
	listNodes := shape{"list-nodes", metricsV1beta1 + "/nodes"}
	// The APIService is Available; the aggregator's proxy learns that from
	// its informer, a moment later.
	must(t, boundedPoll(ctx, aggregatorLag, "metrics-server to serve through the aggregator", []*cluster.Process{ms.Process}, served(listNodes)))

	base := repoPath(t, "manifests", "base")
	began := time.Now()
	s, err := env.DeployServer(ctx, c, env.ServerConfig{ManifestsDir: base, BinDir: suite.binDir, KubeletCAFile: fleet.CAFile,
		MetricResolution: suite.resolution, KubeletRequestTimeout: suite.timeout, ForceConflicts: true, ProcessName: "gms-migration"})
	must(t, err)
	tookOver := time.Since(began)
	for _, name := range env.MetricsAPIServices {
		obj := apiService(ctx, t, dyn, name)
		if _, found, _ := unstructured.NestedBool(obj.Object, "spec", "insecureSkipTLSVerify"); found {
			t.Errorf("%s still has insecureSkipTLSVerify", name)
		}
		if svc, _, _ := unstructured.NestedString(obj.Object, "spec", "service", "name"); svc != "group-metrics-server" {
			t.Errorf("%s points at service %q", name, svc)
		}
	}
	// Ours alone serves from here: metrics-server goes, as its Deployment
	// would when the user deletes it.
	if err := ms.Process.Stop(); err != nil {
		t.Errorf("stop metrics-server: %v", err)
	}
	// The aggregator's proxy follows the APIServices' new service and
	// caBundle from its informer, so it may still send a request to
	// metrics-server just after DeployServer returned: wait for it to serve
	// ours, within takeOverBound from the apply.
	for _, sh := range []shape{listNodes, {"list-nodes-v1", "/apis/metrics.k8s.io/v1/nodes"}} {
		what := sh.name + " through the aggregator after metrics-server stopped"
		if err := boundedPoll(ctx, time.Until(began.Add(takeOverBound)), what, []*cluster.Process{s.Process}, served(sh)); err != nil {
			t.Error(err)
		}
	}
	t.Logf("applied over metrics-server v0.8.0: every APIService Available and verified against our caBundle %v later (bound %v)", tookOver.Round(time.Millisecond), takeOverBound)
	if tookOver > takeOverBound {
		t.Errorf("took over in %v, bound %v", tookOver, takeOverBound)
	}
	checkRecreated(ctx, t, c, dyn, s)
	checkUninstall(ctx, t, c, dyn, s, base)
}

// checkRecreated deletes v1beta1.metrics.k8s.io, as uninstalling
// metrics-server does, and waits for the controller to create it again.
func checkRecreated(ctx context.Context, t *testing.T, c *cluster.Cluster, dyn dynamic.Interface, s *env.Server) {
	deleted := time.Now()
	must(t, dyn.Resource(certs.APIServiceResource).Delete(ctx, env.MetricsAPIServices[0], metav1.DeleteOptions{}))
	recreateCtx, cancel := context.WithTimeout(ctx, recreateBound)
	defer cancel()
	must(t, cluster.Poll(recreateCtx, "the deleted APIService to come back", []*cluster.Process{s.Process, s.Controller}, func(ctx context.Context) error {
		_, err := dyn.Resource(certs.APIServiceResource).Get(ctx, env.MetricsAPIServices[0], metav1.GetOptions{})
		return err
	}))
	back := time.Since(deleted)
	must(t, c.WaitForAPIServiceAvailable(recreateCtx, env.MetricsAPIServices[0]))
	t.Logf("deleted APIService created again %v later, Available %v later (bound %v)", back.Round(time.Millisecond), since(deleted), recreateBound)
	for _, p := range []*cluster.Process{s.Process, s.Controller} {
		if rep := repeatedErrors(t, p.LogPath(), 3); len(rep) > 0 {
			t.Errorf("%s logs errors again and again:\n%s", p.Name(), strings.Join(rep, "\n"))
		}
	}
}

// checkUninstall uninstalls as a user would. The pods would get SIGTERM
// once their Deployments are gone: the processes run until the controller
// has tried once more without its rights, then stop.
func checkUninstall(ctx context.Context, t *testing.T, c *cluster.Cluster, dyn dynamic.Interface, s *env.Server, base string) {
	uninstalled := time.Now()
	// --ignore-not-found: the harness runs the Deployments as processes,
	// so they were never created.
	if _, stderr, err := c.Kubectl(ctx, "delete", "-k", base, "--wait=true", "--ignore-not-found"); err != nil {
		t.Fatalf("kubectl delete -k manifests/base: %v: %s", err, stderr)
	}
	if err := boundedPoll(ctx, time.Minute, "the controller to run without its rights", nil, func(context.Context) error {
		select {
		case <-s.Controller.Done():
			return nil
		default:
		}
		lines, err := linesWith(s.Controller.LogPath(), "forbidden")
		if err == nil && len(lines) == 0 {
			err = errors.New("no refused call yet")
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	_ = s.Controller.Stop()
	_ = s.Process.Stop()
	if err := boundedPoll(ctx, uninstallBound, "no object of ours left", nil, func(ctx context.Context) error {
		left, err := labelled(ctx, dyn, ourLabel)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	t.Logf("kubectl delete -k manifests/base: no object labelled %s %v after it began", ourLabel, since(uninstalled))
}

func apiService(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := dyn.Resource(certs.APIServiceResource).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	return obj
}

// ourKinds are every kind the manifests and the controller create.
var ourKinds = []schema.GroupVersionResource{
	certs.APIServiceResource,
	{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "services"}, {Version: "v1", Resource: "configmaps"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
}

// labelled returns every object of ourKinds, and of more, that matches
// selector.
func labelled(ctx context.Context, dyn dynamic.Interface, selector string, more ...schema.GroupVersionResource) ([]string, error) {
	var out []string
	for _, gvr := range append(slices.Clone(ourKinds), more...) {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for _, o := range list.Items {
			out = append(out, gvr.Resource+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	return out, nil
}

// klogError matches the header of a klog error line.
var klogError = regexp.MustCompile(`^E\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ `)

// repeatedErrors returns the error lines of a klog file whose text (past
// the header) occurs at least n times.
func repeatedErrors(t *testing.T, path string, n int) []string {
	t.Helper()
	lines, err := linesWith(path, "")
	must(t, err)
	count := map[string]int{}
	for _, l := range lines {
		if klogError.MatchString(l) {
			count[klogError.ReplaceAllString(l, "")]++
		}
	}
	var out []string
	for text, k := range count {
		if k >= n {
			out = append(out, fmt.Sprintf("%d× %.300s", k, text))
		}
	}
	return out
}
