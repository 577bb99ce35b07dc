//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// The kubelet-refuses-server case runs a second server, the test's command
// line, unregistered, as a ServiceAccount holding every grant manifests/base
// gives the server's but get nodes/stats. The real kubelet authorizes
// /stats/summary as that (webhook, a SubjectAccessReview) and answers 403,
// which the server must count on every tick in
// group_metrics_server_scraper_target_failures_total{source="kubelet",
// reason="http_status"} (docs/operations.md: the kubelet's 401/403) and log
// once, when the target starts failing (pkg/sources/scraper.go, setHealth).
// The fake kubelets authenticate the token (TokenReview) but do not authorize
// (test/fakekubelet/node.go): the same server reads every kwok node.
const (
	rsServiceAccount = "gms-stripped"
	rsProcess        = "gms-realnode-stripped"
	rsTicks          = 2 // collections watched after the first failure
)

func checkStrippedServer(ctx context.Context, t *testing.T, rn *realNodeEnv) {
	began := time.Now()
	node := rn.node.Name()
	kubeconfig := rsGrant(ctx, t, rn, rsServiceAccount, "manifests/base", func(res string) bool { return res != "nodes/stats" })
	rsCheckAccess(ctx, t, rn, rsServiceAccount, false, false)
	proc, cfg := startServerLike(t, rn.server, rsProcess, "--kubeconfig="+kubeconfig)
	client, err := rest.HTTPClientFor(cfg)
	must(t, err)
	defer client.CloseIdleConnections()
	ep := endpoint{base: cfg.Host, client: client}
	watch := append(watched(), proc)

	var first rsReading
	must(t, boundedPoll(ctx, time.Minute, rsProcess+" to count the real node's failure", watch, func(ctx context.Context) error {
		r, err := rsRead(ctx, ep)
		if err == nil && r.failures == 0 {
			err = fmt.Errorf("no kubelet http_status failure counted after %v ticks", r.ticks)
		}
		first = r
		return err
	}))
	t.Logf("%s: first failure counted %v after the case began: %+v", rsProcess, since(began), first)
	// The count grows with the collections: each tick scrapes the node once
	// (and an early scrape, after a pod starts on it, once more). A reading
	// may fall between a tick's failure and its end, so the count may lead
	// the ticks by one, at either end.
	prev, last := first, first
	must(t, boundedPoll(ctx, time.Duration(rsTicks+2)*suite.resolution, fmt.Sprintf("%d more collections", rsTicks), watch, func(ctx context.Context) error {
		r, err := rsRead(ctx, ep)
		if err != nil {
			return err
		}
		if r.ticks != prev.ticks {
			t.Logf("%s: after %v ticks, %v kubelet http_status failures (%v of any reason), %v failing kubelet targets", rsProcess, r.ticks, r.failures, r.allKubelet, r.failing)
			prev = r
		}
		last = r
		if r.ticks < first.ticks+rsTicks {
			return fmt.Errorf("%v ticks, want %v", r.ticks, first.ticks+rsTicks)
		}
		return nil
	}))
	dt, df, de := last.ticks-first.ticks, last.failures-first.failures, last.early-first.early
	if df < dt-1 || df > dt+1+de {
		t.Errorf("%s: %v failures counted over %v ticks (%v early scrapes), want one a tick", rsProcess, df, dt, de)
	}
	if last.allKubelet != last.failures || last.failing != 1 {
		t.Errorf("%s: %v kubelet failures of any reason, %v of them http_status; %v failing kubelet targets, want only the real node's", rsProcess, last.allKubelet, last.failures, last.failing)
	}
	rsCheckLog(t, proc, node, last.failures)
	rsCheckFakeNodes(ctx, t, cfg, node)
	t.Logf("case took %v", since(began))
}

// startServerLike starts srv's command line again as the process name on
// another port, unregistered, with extra flags (later flags win: another
// identity is "--kubeconfig=…"); the serving certificate is srv's. It
// returns the process and a config that reaches it as the suite's admin.
func startServerLike(t *testing.T, srv *env.Server, name string, extra ...string) (*cluster.Process, *rest.Config) {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	must(t, err)
	args := append(slices.Clone(srv.Args), "--secure-port="+strconv.Itoa(ports[0]))
	proc, err := suite.cluster.StartProcess(name, filepath.Join(suite.binDir, env.ServerBinary), append(args, extra...)...)
	must(t, err)
	t.Cleanup(func() { _ = proc.Stop() })
	cfg := suite.cluster.RESTConfig()
	cfg.Host = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	cfg.ServerName, cfg.CAData, cfg.Timeout = srv.ServiceHost, srv.CABundle, 30*time.Second
	return proc, cfg
}

// rsReading is what the server's /metrics says of its kubelet source.
type rsReading struct {
	ticks      float64 // collections: the main scraper's ticks
	failures   float64 // failed scrapes, reason http_status
	allKubelet float64 // failed scrapes, any reason
	early      float64 // early scrapes (after a pod starts on a node)
	failing    float64 // targets whose last scrape failed
}

func rsRead(ctx context.Context, ep endpoint) (rsReading, error) {
	body, err := selfMetrics(ctx, ep)
	if err != nil {
		return rsReading{}, err
	}
	var r rsReading
	for _, m := range []struct {
		v      *float64
		name   string
		labels []string
	}{
		{&r.ticks, "group_metrics_server_scraper_cycle_duration_seconds_count", nil},
		{&r.failures, "group_metrics_server_scraper_target_failures_total", []string{`source="kubelet"`, `reason="http_status"`}},
		{&r.allKubelet, "group_metrics_server_scraper_target_failures_total", []string{`source="kubelet"`}},
		{&r.early, "group_metrics_server_scraper_early_scrapes_total", []string{`source="kubelet"`}},
		{&r.failing, "group_metrics_server_scraper_targets", []string{`source="kubelet"`, `state="failing"`}},
	} {
		if *m.v, _, err = promtext.Value(body, m.name, m.labels...); err != nil {
			return r, err
		}
	}
	return r, nil
}

// rsCheckLog checks that the server's log holds exactly one line about the
// real node: its scrape failing, with the kubelet's 403 and its words, which
// name the identity and the grant it lacks.
func rsCheckLog(t *testing.T, proc *cluster.Process, node string, failures float64) {
	t.Helper()
	lines, err := linesWith(proc.LogPath(), node)
	must(t, err)
	t.Logf("%s: %d line(s) of its log name %s, after %v failures counted:\n%s", proc.Name(), len(lines), node, failures, strings.Join(lines, "\n"))
	if len(lines) != 1 {
		t.Fatalf("%s: %d log lines name %s, want exactly 1", proc.Name(), len(lines), node)
	}
	for _, want := range []string{`"Scrape target failing"`, `target="node/` + node + `"`, `reason="http_status"`, "403 Forbidden",
		"Forbidden (user=system:serviceaccount:", ":" + rsServiceAccount + ", verb=get, resource=nodes, subresource(s)=[stats])"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("%s: the log line about %s lacks %s", proc.Name(), node, want)
		}
	}
}

// rsCheckFakeNodes checks that the server, reached at cfg, serves every
// kwok node of the fleet and not the real one.
func rsCheckFakeNodes(ctx context.Context, t *testing.T, cfg *rest.Config, node string) {
	t.Helper()
	mc, err := metricsclient.NewForConfig(cfg)
	must(t, err)
	list, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	must(t, err)
	served := map[string]bool{}
	for _, nm := range list.Items {
		served[nm.Name] = true
	}
	missing := slices.DeleteFunc(slices.Clone(suite.fleet.NodeNames), func(n string) bool { return served[n] })
	t.Logf("%s serves %d NodeMetrics; the fleet has %d kwok nodes", rsProcess, len(list.Items), len(suite.fleet.NodeNames))
	if len(missing) > 0 {
		t.Errorf("%s serves no NodeMetrics for kwok nodes %v", rsProcess, missing)
	}
	if served[node] {
		t.Errorf("%s serves NodeMetrics for %s, whose kubelet refuses it", rsProcess, node)
	}
	_, err = mc.MetricsV1beta1().NodeMetricses().Get(ctx, node, metav1.GetOptions{})
	t.Logf("%s: get NodeMetrics %s: %v", rsProcess, node, err)
	if !apierrors.IsNotFound(err) {
		t.Errorf("%s: get NodeMetrics %s: %v, want NotFound", rsProcess, node, err)
	}
}

// rsGrant creates the ServiceAccount account in the test's namespace with
// every binding the kustomization dir gives the server's, each of its
// ClusterRoles copied with only the resources keep keeps (all when keep is
// nil), and returns a kubeconfig of its token. All is deleted when the test
// ends.
func rsGrant(ctx context.Context, t *testing.T, rn *realNodeEnv, account, dir string, keep func(resource string) bool) string {
	t.Helper()
	client := suite.cluster.Client()
	objs, err := env.Render(ctx, suite.cluster, repoPath(t, dir))
	must(t, err)
	roles := map[string]rbacv1.ClusterRole{}
	var crbs []rbacv1.ClusterRoleBinding
	var rbs []rbacv1.RoleBinding
	for _, o := range objs {
		into := map[string]any{"ClusterRole": &rbacv1.ClusterRole{}, "ClusterRoleBinding": &rbacv1.ClusterRoleBinding{}, "RoleBinding": &rbacv1.RoleBinding{}}[o.GetKind()]
		if into == nil {
			continue
		}
		must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into))
		switch v := into.(type) {
		case *rbacv1.ClusterRole:
			roles[v.Name] = *v
		case *rbacv1.ClusterRoleBinding:
			crbs = append(crbs, *v)
		case *rbacv1.RoleBinding:
			rbs = append(rbs, *v)
		}
	}
	isServer := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == rn.server.Namespace && s.Name == rn.server.ServiceAccount
		})
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: rn.ns, Name: account}}
	_, err = client.CoreV1().ServiceAccounts(rn.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{})
	must(t, err)
	prefix := rn.ns + "-" + account + ":"
	// roleRef returns what to bind in place of ref: for a ClusterRole of the
	// manifests, a copy with what keep keeps.
	copies := map[string]bool{}
	roleRef := func(ref rbacv1.RoleRef) rbacv1.RoleRef {
		r, ok := roles[ref.Name]
		if ref.Kind != "ClusterRole" || !ok {
			return ref
		}
		ref.Name = prefix + r.Name
		if copies[ref.Name] {
			return ref
		}
		copies[ref.Name] = true
		stripped := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}}
		for _, rule := range r.Rules {
			if keep != nil {
				rule.Resources = slices.DeleteFunc(slices.Clone(rule.Resources), func(res string) bool { return !keep(res) })
			}
			if len(rule.Resources) > 0 {
				stripped.Rules = append(stripped.Rules, rule)
			}
		}
		rsCreate(ctx, t, client.RbacV1().ClusterRoles(), stripped)
		return ref
	}
	var bound []string
	for _, b := range crbs {
		if isServer(b.Subjects) {
			crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: prefix + b.Name}, RoleRef: roleRef(b.RoleRef), Subjects: subject}
			rsCreate(ctx, t, client.RbacV1().ClusterRoleBindings(), crb)
			bound = append(bound, crb.RoleRef.Kind+" "+crb.RoleRef.Name)
		}
	}
	for _, b := range rbs {
		if isServer(b.Subjects) {
			rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: prefix + b.Name, Namespace: b.Namespace}, RoleRef: roleRef(b.RoleRef), Subjects: subject}
			rsCreate(ctx, t, client.RbacV1().RoleBindings(rb.Namespace), rb)
			bound = append(bound, rb.RoleRef.Kind+" "+rb.RoleRef.Name+" in "+rb.Namespace)
		}
	}
	t.Logf("system:serviceaccount:%s:%s bound to %s", rn.ns, account, strings.Join(bound, ", "))
	kubeconfig, err := suite.cluster.ServiceAccountKubeconfig(ctx, rn.ns, account)
	must(t, err)
	return kubeconfig
}

// rsCreate creates obj through api and deletes it when the test ends.
func rsCreate[T metav1.Object](ctx context.Context, t *testing.T, api interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, obj T) {
	_, err := api.Create(ctx, obj, metav1.CreateOptions{})
	must(t, err)
	cleanup(t, fmt.Sprintf("delete %T %s/%s", obj, obj.GetNamespace(), obj.GetName()), func(ctx context.Context) error {
		return api.Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
	})
}

// rsCheckAccess checks with SubjectAccessReviews that account may list
// nodes and pods, and get the real node's nodes/stats and nodes/metrics as
// stats and metrics say.
func rsCheckAccess(ctx context.Context, t *testing.T, rn *realNodeEnv, account string, stats, metrics bool) {
	t.Helper()
	client := suite.cluster.Client()
	user := "system:serviceaccount:" + rn.ns + ":" + account
	for _, c := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "stats", Name: rn.node.Name()}, stats},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "metrics", Name: rn.node.Name()}, metrics},
	} {
		// RBAC answers from its informers' caches: poll until they hold the
		// bindings.
		must(t, pollBounded(ctx, 30*time.Second, fmt.Sprintf("%s %s/%s allowed=%v for %s", c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.want, user), func(ctx context.Context) error {
			sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + rn.ns, "system:authenticated"}, ResourceAttributes: &c.attrs,
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if sar.Status.Allowed != c.want {
				return fmt.Errorf("allowed=%v (%s)", sar.Status.Allowed, sar.Status.Reason)
			}
			return nil
		}))
	}
}
