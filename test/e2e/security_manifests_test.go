//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// serverDeployment is the Deployment (and its container) the manifests run the server in;
// controllerDeployment runs the certificate controller. insecureKubeletFlag turns off verification of kubelet
// serving certificates. It may appear in one manifest only: the development component
// insecureKubeletComponent (for kind and minikube, whose kubelets serve self-signed certificates), and in the
// server's arguments only of kustomizations that include that component.
const (
	serverDeployment         = "group-metrics-server"
	controllerDeployment     = "group-metrics-server-cert-controller"
	insecureKubeletFlag      = "--kubelet-insecure-tls"
	insecureKubeletComponent = "manifests/components/insecure-kubelet-tls"
)

var (
	// readVerbs are the only verbs a role bound to the serving identity may grant: its credential is sent to
	// every kubelet.
	readVerbs = []string{"get", "list", "watch"}
	// insecureFlags may not appear in a shipped manifest.
	insecureFlags = []string{
		"--kubelet-insecure-tls", "--ukpd-insecure-tls", "--profiling", "--contention-profiling", "--debug-socket-path",
	}
)

// TestManifestsHardened renders every kustomization under manifests/ and checks what each would run, and its
// RBAC grants against docs/security.md.
func TestManifestsHardened(t *testing.T) {
	ctx := begin(t, 2*time.Minute)
	root := repoPath(t)
	doc := readFile(t, filepath.Join(root, "docs", "security.md"))
	// The grants docs/security.md lists: the backquoted first cell of every table row that starts with a role
	// kind.
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `((?:Cluster)?Role [^`]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	if len(documented) == 0 {
		t.Fatal("docs/security.md lists no grant")
	}
	dirs, granted, servers := kustomizations(t, root), map[string]bool{}, 0
	for _, rel := range slices.Sorted(maps.Keys(dirs)) {
		t.Run(rel, func(t *testing.T) {
			objs, err := env.Render(ctx, suite.cluster, filepath.Join(root, rel))
			must(t, err)
			for _, o := range objs {
				checkObject(t, o)
				switch kind, name := o.GetKind(), o.GetName(); {
				case kind == "Deployment" && name == serverDeployment:
					servers++
					checkServerDeployment(t, o, dirs[rel])
				case kind == "DaemonSet" && name == relayName, kind == "Deployment" && name == controllerDeployment:
					checkServerDeployment(t, o, false)
				}
			}
			for _, d := range []string{serverDeployment, controllerDeployment, relayName} {
				grants, writes := grantsTo(t, objs, d)
				for _, g := range grants {
					granted[g] = true
					if !documented[g] {
						t.Errorf("grant not listed in docs/security.md: `%s`", g)
					}
				}
				if d != controllerDeployment {
					for _, w := range writes {
						t.Errorf("%s, whose credential leaves the process (to every kubelet and relay, or on every host), may write: `%s`", d, w)
					}
				}
			}
		})
	}
	if servers == 0 {
		t.Error("no kustomization renders the server's Deployment")
	}
	for g := range documented {
		if !granted[g] {
			t.Errorf("docs/security.md lists a grant no manifest makes: `%s`", g)
		}
	}
	t.Logf("%d kustomizations, %d server Deployments, %d distinct grants to the identities", len(dirs), servers, len(granted))

	// The NetworkPolicy component, applied without the control plane's CIDR patched in, is refused rather
	// than cutting off the aggregator.
	_, stderr, err := suite.cluster.Kubectl(ctx, "apply", "--dry-run=server", "-f", filepath.Join(root, "manifests", "components", "network-policy", "networkpolicy.yaml"))
	if err == nil || !strings.Contains(stderr, "cidr") {
		t.Errorf("the unpatched NetworkPolicy component was not refused for its CIDR: %v %s", err, stderr)
	}

	// The suite's server runs with exactly these grants (its kubeconfig holds a token of the manifests'
	// ServiceAccount): none of its calls so far was refused.
	for _, l := range matchingLines(string(readFile(t, suite.server.Process.LogPath())), "forbidden") {
		t.Errorf("the server was refused a call: %.300s", l)
	}
}

// kustomizations returns the directories (relative to root) under manifests/ with a kustomization that builds
// on its own (components only build as part of another), each with whether it includes
// insecureKubeletComponent. It fails for every file outside that component that names insecureKubeletFlag,
// and when the component itself no longer does.
func kustomizations(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	inComponent := false
	must(t, filepath.WalkDir(filepath.Join(root, "manifests"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if bytes.Contains(b, []byte(insecureKubeletFlag)) {
			if filepath.Dir(rel) == insecureKubeletComponent {
				inComponent = true
			} else {
				t.Errorf("%s names %s; only %s may", rel, insecureKubeletFlag, insecureKubeletComponent)
			}
		}
		if d.Name() != "kustomization.yaml" {
			return nil
		}
		var k struct {
			Kind       string   `json:"kind"`
			Components []string `json:"components"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if dir := filepath.Dir(rel); k.Kind != "Component" {
			out[dir] = slices.ContainsFunc(k.Components, func(c string) bool {
				return filepath.Clean(filepath.Join(dir, c)) == insecureKubeletComponent
			})
		}
		return nil
	}))
	if !inComponent {
		t.Errorf("%s does not set %s", insecureKubeletComponent, insecureKubeletFlag)
	}
	return out
}

// checkObject checks what applies to every manifest.
func checkObject(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	id := o.GetKind() + " " + o.GetName()
	// The ukpd relay alone shares the host's network: ukpd listens on the host's loopback
	// (manifests/components/ukpd-relay).
	hostNetworkOK := o.GetKind() == "DaemonSet" && o.GetName() == relayName
	for _, spec := range podSpecs(t, o) {
		if (spec.HostNetwork && !hostNetworkOK) || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: shares a host namespace", id)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: mounts host path %s", id, v.HostPath.Path)
			}
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			sc := cmp.Or(c.SecurityContext, &corev1.SecurityContext{})
			if ptr.Deref(sc.Privileged, false) {
				t.Errorf("%s: container %s is privileged", id, c.Name)
			}
			if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: container %s adds capabilities %v", id, c.Name, sc.Capabilities.Add)
			}
		}
	}
	switch o.GetKind() {
	case "APIService":
		if skip, _, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify"); skip {
			t.Errorf("%s: insecureSkipTLSVerify", id)
		}
		if _, ok, _ := unstructured.NestedMap(o.Object, "spec", "service"); !ok {
			t.Errorf("%s: no service", id)
		}
	case "NetworkPolicy":
		var np networkingv1.NetworkPolicy
		fromUnstructured(t, o, &np)
		if sel := np.Spec.PodSelector.MatchLabels; len(sel) != 1 || sel["app.kubernetes.io/name"] != serverDeployment {
			t.Errorf("%s: selects %v, not the server's pods alone", id, sel)
		}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port == nil || p.Port.String() != "https" {
					t.Errorf("%s: admits port %v, not the server's https port alone", id, p.Port)
				}
			}
			for _, f := range r.From {
				if b := f.IPBlock; b != nil {
					if _, err := netip.ParsePrefix(b.CIDR); err != nil {
						t.Errorf("%s: %v", id, err)
					}
				}
			}
		}
	case "Role", "ClusterRole":
		var role rbacv1.ClusterRole
		fromUnstructured(t, o, &role)
		for _, r := range role.Rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
				if slices.Contains(list, "*") {
					t.Errorf("%s: wildcard in rule %v", id, r)
				}
			}
		}
	}
}

// checkServerDeployment checks the server's pod and container hardening. devInsecure: the kustomization
// includes the development component insecure-kubelet-tls, so --kubelet-insecure-tls, and no other weakening
// flag, must be set.
func checkServerDeployment(t *testing.T, o *unstructured.Unstructured, devInsecure bool) {
	t.Helper()
	specs := podSpecs(t, o)
	if len(specs) != 1 {
		t.Fatalf("Deployment %s: %d pod templates", o.GetName(), len(specs))
	}
	pod := cmp.Or(specs[0].SecurityContext, &corev1.PodSecurityContext{})
	for _, c := range slices.Concat(specs[0].InitContainers, specs[0].Containers) {
		fail := func(what string) { t.Errorf("Deployment %s, container %s: %s", o.GetName(), c.Name, what) }
		sc := cmp.Or(c.SecurityContext, &corev1.SecurityContext{})
		uid := cmp.Or(sc.RunAsUser, pod.RunAsUser)
		seccomp := cmp.Or(sc.SeccompProfile, pod.SeccompProfile)
		for _, check := range []struct {
			ok   bool
			what string
		}{
			{ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(pod.RunAsNonRoot, false), "runAsNonRoot is not true"},
			{uid != nil && *uid != 0, "runAsUser is not a non-zero UID"},
			{!ptr.Deref(sc.AllowPrivilegeEscalation, true), "allowPrivilegeEscalation is not false"},
			{ptr.Deref(sc.ReadOnlyRootFilesystem, false), "readOnlyRootFilesystem is not true"},
			{sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL"), "capabilities do not drop ALL"},
			{seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccompProfile is not RuntimeDefault"},
		} {
			if !check.ok {
				fail(check.what)
			}
		}
		insecureKubelet := false
		for _, a := range slices.Concat(c.Command, c.Args) {
			switch name, _, _ := strings.Cut(a, "="); {
			case devInsecure && name == insecureKubeletFlag:
				insecureKubelet = true
			case slices.Contains(insecureFlags, name):
				fail("sets " + a)
			}
		}
		if devInsecure && c.Name == serverDeployment && !insecureKubelet {
			fail("includes " + insecureKubeletComponent + " but does not set " + insecureKubeletFlag)
		}
	}
}

// podSpecs returns the pod specs in o, of any kind: every map that holds containers.
func podSpecs(t *testing.T, o *unstructured.Unstructured) []corev1.PodSpec {
	t.Helper()
	var out []corev1.PodSpec
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["containers"]; !ok {
				for _, x := range v {
					walk(x)
				}
				return
			}
			var spec corev1.PodSpec
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(v, &spec); err != nil {
				t.Fatalf("%s %s: pod spec: %v", o.GetKind(), o.GetName(), err)
			}
			out = append(out, spec)
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(o.Object)
	return out
}

// grantsTo returns what the objs grant the ServiceAccount of the Deployment or DaemonSet named workload, one
// line per rule: "ClusterRole <name>: <group>/<resource>[<names>]: <verbs>", "Role <namespace>/<name>: ..."
// for namespaced roles, and "<Kind> <name> (built in)" for a role the manifests bind but do not define; and
// the lines whose verbs go beyond readVerbs.
func grantsTo(t *testing.T, objs []*unstructured.Unstructured, workload string) (grants, writes []string) {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	var sa rbacv1.Subject
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
			if o.GetName() == workload {
				sa.Namespace = o.GetNamespace()
				sa.Name, _, _ = unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
			}
		case "Role", "ClusterRole":
			var r rbacv1.ClusterRole
			fromUnstructured(t, o, &r)
			roles[roleKey(o.GetKind(), o.GetNamespace(), o.GetName())] = r.Rules
		}
	}
	for _, o := range objs {
		if sa.Name == "" || (o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding") {
			continue
		}
		var b rbacv1.RoleBinding
		fromUnstructured(t, o, &b)
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Name != sa.Name || s.Namespace != sa.Namespace {
				continue
			}
			key := roleKey(b.RoleRef.Kind, o.GetNamespace(), b.RoleRef.Name)
			rules, ok := roles[key]
			if !ok {
				// The built-in roles bound are system:auth-delegator (create tokenreviews and
				// subjectaccessreviews: questions, which store nothing) and
				// extension-apiserver-authentication-reader (get, list, watch one ConfigMap); the e2e rules
				// review of the kubelets' credential checks what they grant.
				grants = append(grants, key+" (built in)")
				continue
			}
			for _, r := range rules {
				names := ""
				if len(r.ResourceNames) > 0 {
					names = "[" + strings.Join(r.ResourceNames, ",") + "]"
				}
				write := slices.ContainsFunc(r.Verbs, func(v string) bool { return !slices.Contains(readVerbs, v) })
				for _, u := range r.NonResourceURLs {
					grants = append(grants, fmt.Sprintf("%s: nonResourceURL %s: %s", key, u, strings.Join(r.Verbs, ",")))
				}
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						line := fmt.Sprintf("%s: %s/%s%s: %s", key, g, res, names, strings.Join(r.Verbs, ","))
						grants = append(grants, line)
						if write {
							writes = append(writes, line)
						}
					}
				}
			}
		}
	}
	slices.Sort(grants)
	return grants, writes
}

// roleKey names a role; a ClusterRole has no namespace, even when a RoleBinding refers to it.
func roleKey(kind, ns, name string) string {
	if ns == "" || kind == "ClusterRole" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}
