//go:build e2e

package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// serverDeployment is the Deployment (and its container) the manifests run
// the server in; controllerDeployment runs the certificate controller.
const (
	serverDeployment     = "group-metrics-server"
	controllerDeployment = "group-metrics-server-cert-controller"
)

// readVerbs are the only verbs a role bound to the serving identity may
// grant: its credential is sent to every kubelet.
var readVerbs = []string{"get", "list", "watch"}

// insecureFlags may not appear in a shipped manifest.
var insecureFlags = []string{"--kubelet-insecure-tls", "--ukpd-insecure-tls", "--profiling", "--contention-profiling", "--debug-socket-path"}

// TestManifestsHardened renders every kustomization under manifests/ and checks
// what each would run, and its RBAC grants against docs/security.md.
func TestManifestsHardened(t *testing.T) {
	ctx := begin(t, 2*time.Minute)
	root, err := env.RepoRoot()
	must(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	must(t, err)
	documented := documentedGrants(string(doc))
	if len(documented) == 0 {
		t.Fatal("docs/security.md lists no grant")
	}
	dirs, err := kustomizations(filepath.Join(root, "manifests"))
	must(t, err)
	granted := map[string]bool{}
	servers := 0
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		t.Run(rel, func(t *testing.T) {
			devInsecure := usesInsecureKubeletComponent(t, root, rel)
			objs, err := env.Render(ctx, suite.cluster, dir)
			must(t, err)
			for _, o := range objs {
				checkObject(t, o)
				if o.GetKind() == "Deployment" && o.GetName() == serverDeployment {
					servers++
				}
				if o.GetKind() == "Deployment" && (o.GetName() == serverDeployment || o.GetName() == controllerDeployment) {
					checkServerDeployment(t, o, devInsecure && o.GetName() == serverDeployment)
				}
			}
			for _, d := range []string{serverDeployment, controllerDeployment} {
				grants, writes := grantsTo(t, objs, d)
				for _, g := range grants {
					granted[g] = true
					if !documented[g] {
						t.Errorf("grant not listed in docs/security.md: `%s`", g)
					}
				}
				if d == serverDeployment {
					for _, w := range writes {
						t.Errorf("the serving identity, whose credential every kubelet receives, may write: `%s`", w)
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
	checkInsecureKubeletFlagConfined(t, root)
	t.Logf("%d kustomizations, %d server Deployments, %d distinct grants to the two identities", len(dirs), servers, len(granted))

	// The suite's server runs with exactly these grants (its kubeconfig
	// holds a token of the manifests' ServiceAccount): none of its calls
	// so far was refused.
	refused, err := linesWith(suite.server.Process.LogPath(), "forbidden")
	must(t, err)
	for _, l := range refused {
		t.Errorf("the server was refused a call: %.300s", l)
	}
}

// kustomizations returns the directories under dir with a kustomization
// that builds on its own (components only build as part of another).
func kustomizations(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`(?m)^kind:\s*Component\s*$`).Match(b) {
			out = append(out, filepath.Dir(path))
		}
		return nil
	})
	return out, err
}

// checkObject checks what applies to every manifest.
func checkObject(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	id := o.GetKind() + " " + o.GetName()
	for _, spec := range podSpecs(t, o) {
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: shares a host namespace", id)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: mounts host path %s", id, v.HostPath.Path)
			}
		}
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			if sc := c.SecurityContext; sc != nil {
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("%s: container %s is privileged", id, c.Name)
				}
				if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s: container %s adds capabilities %v", id, c.Name, sc.Capabilities.Add)
				}
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

// checkServerDeployment checks the server's pod and container hardening.
// devInsecure: the kustomization includes the development component
// insecure-kubelet-tls, so --kubelet-insecure-tls, and no other weakening
// flag, must be set.
func checkServerDeployment(t *testing.T, o *unstructured.Unstructured, devInsecure bool) {
	t.Helper()
	specs := podSpecs(t, o)
	if len(specs) != 1 {
		t.Fatalf("Deployment %s: %d pod templates", o.GetName(), len(specs))
	}
	spec := specs[0]
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		fail := func(what string) { t.Errorf("Deployment %s, container %s: %s", o.GetName(), c.Name, what) }
		if !isTrue(sc.RunAsNonRoot) && !isTrue(pod.RunAsNonRoot) {
			fail("runAsNonRoot is not true")
		}
		if uid := firstSet(sc.RunAsUser, pod.RunAsUser); uid == nil || *uid == 0 {
			fail("runAsUser is not a non-zero UID")
		}
		if !isFalse(sc.AllowPrivilegeEscalation) {
			fail("allowPrivilegeEscalation is not false")
		}
		if !isTrue(sc.ReadOnlyRootFilesystem) {
			fail("readOnlyRootFilesystem is not true")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			fail("capabilities do not drop ALL")
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			fail("seccompProfile is not RuntimeDefault")
		}
		insecureKubelet := false
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			name, _, _ := strings.Cut(a, "=")
			if devInsecure && name == insecureKubeletFlag {
				insecureKubelet = true
				continue
			}
			if slices.Contains(insecureFlags, name) {
				fail("sets " + a)
			}
		}
		if devInsecure && c.Name == serverDeployment && !insecureKubelet {
			fail("includes " + insecureKubeletComponent + " but does not set " + insecureKubeletFlag)
		}
	}
}

// podSpecs returns the pod templates of o.
func podSpecs(t *testing.T, o *unstructured.Unstructured) []corev1.PodSpec {
	t.Helper()
	var paths [][]string
	switch o.GetKind() {
	case "Pod":
		paths = [][]string{{"spec"}}
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
		paths = [][]string{{"spec", "template", "spec"}}
	case "CronJob":
		paths = [][]string{{"spec", "jobTemplate", "spec", "template", "spec"}}
	case "LeaderWorkerSet":
		paths = [][]string{
			{"spec", "leaderWorkerTemplate", "leaderTemplate", "spec"},
			{"spec", "leaderWorkerTemplate", "workerTemplate", "spec"},
		}
	}
	var out []corev1.PodSpec
	for _, p := range paths {
		m, ok, err := unstructured.NestedMap(o.Object, p...)
		if err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if !ok {
			continue
		}
		var spec corev1.PodSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
			t.Fatalf("%s %s: pod spec: %v", o.GetKind(), o.GetName(), err)
		}
		out = append(out, spec)
	}
	return out
}

// grantsTo returns what the objs grant the ServiceAccount of the Deployment
// named deployment, one line per rule: "ClusterRole <name>:
// <group>/<resource>[<names>]: <verbs>", "Role <namespace>/<name>: ..." for
// namespaced roles, and "<Kind> <name> (built in)" for a role the manifests
// bind but do not define; and the lines whose verbs go beyond readVerbs.
func grantsTo(t *testing.T, objs []*unstructured.Unstructured, deployment string) (grants, writes []string) {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	var bindings []struct {
		ns  string
		ref rbacv1.RoleRef
	}
	var saNamespace, saName string
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			if o.GetName() == deployment {
				saNamespace = o.GetNamespace()
				saName, _, _ = unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
			}
		case "Role", "ClusterRole":
			var r rbacv1.ClusterRole
			fromUnstructured(t, o, &r)
			roles[roleKey(o.GetKind(), o.GetNamespace(), o.GetName())] = r.Rules
		}
	}
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		fromUnstructured(t, o, &b)
		for _, s := range b.Subjects {
			if saName != "" && s.Kind == rbacv1.ServiceAccountKind && s.Name == saName && s.Namespace == saNamespace {
				bindings = append(bindings, struct {
					ns  string
					ref rbacv1.RoleRef
				}{o.GetNamespace(), b.RoleRef})
			}
		}
	}
	for _, b := range bindings {
		ns := b.ns
		if b.ref.Kind == "ClusterRole" {
			ns = ""
		}
		key := roleKey(b.ref.Kind, ns, b.ref.Name)
		rules, ok := roles[key]
		if !ok {
			// The built-in roles bound are system:auth-delegator (create
			// tokenreviews and subjectaccessreviews: questions, which
			// store nothing) and extension-apiserver-authentication-reader
			// (get, list, watch one ConfigMap); the e2e rules review of
			// the kubelets' credential checks what they grant.
			grants = append(grants, key+" (built in)")
			continue
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					names := ""
					if len(r.ResourceNames) > 0 {
						names = "[" + strings.Join(r.ResourceNames, ",") + "]"
					}
					line := fmt.Sprintf("%s: %s/%s%s: %s", key, g, res, names, strings.Join(r.Verbs, ","))
					grants = append(grants, line)
					for _, v := range r.Verbs {
						if !slices.Contains(readVerbs, v) {
							writes = append(writes, line)
							break
						}
					}
				}
			}
		}
	}
	sort.Strings(grants)
	return grants, writes
}

func roleKey(kind, ns, name string) string {
	if ns != "" {
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}

// documentedGrants returns the grants docs/security.md lists: the
// backquoted first cell of every table row that starts with a role kind.
func documentedGrants(doc string) map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile("(?m)^\\| `((?:Cluster)?Role [^`]+)` \\|")
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		out[m[1]] = true
	}
	return out
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func isTrue(b *bool) bool  { return b != nil && *b }
func isFalse(b *bool) bool { return b != nil && !*b }

func firstSet(vals ...*int64) *int64 {
	for _, v := range vals {
		if v != nil {
			return v
		}
	}
	return nil
}
