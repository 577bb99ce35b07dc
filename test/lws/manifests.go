package lws

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

const (
	// namePrefix is what the lws release manifests put before the names of
	// cluster-scoped objects.
	namePrefix = "lws-"
	// fieldManager owns the fields Install applies.
	fieldManager = "gms-lws-install"
)

// crdNames are the CustomResourceDefinitions in the module's
// config/crd/bases; the controller watches both kinds.
var crdNames = []string{
	"leaderworkersets.leaderworkerset.x-k8s.io",
	"disaggregatedsets.disaggregatedset.x-k8s.io",
}

// applyCRDs applies the module's CRDs as they are, without the conversion
// webhook patch (each CRD has a single version), and waits until they are
// established. (kubectl wait fails at once on a CRD that has no conditions
// yet, hence the polling.)
func applyCRDs(ctx context.Context, c *cluster.Cluster, moduleDir string) error {
	if err := apply(ctx, c, filepath.Join(moduleDir, "config", "crd", "bases")); err != nil {
		return err
	}
	for _, name := range crdNames {
		if err := cluster.Poll(ctx, "CRD "+name+" to be established", nil, func(ctx context.Context) error {
			crd, err := c.Dynamic().Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return cluster.ConditionTrue(crd, "Established")
		}); err != nil {
			return err
		}
	}
	return nil
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyRBAC creates the controller's namespace and ServiceAccount and binds
// it to the module's manager role (config/rbac/role.yaml) and to the role
// that lets its metrics endpoint authenticate and authorize callers
// (config/rbac/auth_proxy_role.yaml). Leader election is off, so its role is
// left out.
func applyRBAC(ctx context.Context, c *cluster.Cluster, moduleDir, dir string) error {
	items := []any{
		&corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: Namespace},
		},
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: ServiceAccount, Namespace: Namespace},
		},
	}
	for _, file := range []string{"role.yaml", "auth_proxy_role.yaml"} {
		roles, err := readClusterRoles(filepath.Join(moduleDir, "config", "rbac", file))
		if err != nil {
			return err
		}
		for _, role := range roles {
			role.Name = namePrefix + role.Name
			items = append(items, role, &rbacv1.ClusterRoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: role.Name + "binding"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects: []rbacv1.Subject{{
					Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace,
				}},
			})
		}
	}
	return applyList(ctx, c, filepath.Join(dir, "rbac.json"), items)
}

func readClusterRoles(path string) ([]*rbacv1.ClusterRole, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read lws RBAC: %w", err)
	}
	objs, err := chart.Decode(bytes.NewReader(data))
	var roles []*rbacv1.ClusterRole
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && err == nil {
			role := &rbacv1.ClusterRole{}
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role)
			roles = append(roles, role)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(roles) == 0 {
		return nil, fmt.Errorf("%s: no ClusterRole", path)
	}
	return roles, nil
}

// applyWebhooks registers the module's webhook configurations (config/webhook
// built with kustomize, which adds the pods' object selectors), pointed at
// baseURL. kube-apiserver can only reach a webhook on 127.0.0.1 by URL: a
// Service cannot point at a loopback address.
func applyWebhooks(ctx context.Context, c *cluster.Cluster, moduleDir, dir, baseURL string) error {
	manifests, _, err := c.Kubectl(ctx, "kustomize", filepath.Join(moduleDir, "config", "webhook"))
	if err != nil {
		return fmt.Errorf("build lws webhook manifests: %w", err)
	}
	items, err := webhookConfigurations([]byte(manifests), baseURL, c.CACertPEM())
	if err != nil {
		return fmt.Errorf("lws webhook manifests: %w", err)
	}
	return applyList(ctx, c, filepath.Join(dir, "webhooks.json"), items)
}

// webhookConfigurations returns the mutating and validating webhook
// configurations in manifests, renamed with namePrefix, with each webhook
// calling baseURL plus its service path and trusting caBundle. Other objects
// (the webhook Service) are dropped.
func webhookConfigurations(manifests []byte, baseURL string, caBundle []byte) ([]any, error) {
	objs, err := chart.Decode(bytes.NewReader(manifests))
	if err != nil {
		return nil, err
	}
	var items []any
	for _, obj := range objs {
		if kind := obj.GetKind(); kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration" {
			continue
		}
		webhooks, _, err := unstructured.NestedSlice(obj.Object, "webhooks")
		if err != nil {
			return nil, err
		}
		for _, w := range webhooks {
			webhook, _ := w.(map[string]any)
			path, ok, _ := unstructured.NestedString(webhook, "clientConfig", "service", "path")
			if !ok {
				return nil, fmt.Errorf("webhook %v has no service path", webhook["name"])
			}
			webhook["clientConfig"] = map[string]any{"url": baseURL + path, "caBundle": base64.StdEncoding.EncodeToString(caBundle)}
		}
		obj.SetName(namePrefix + obj.GetName())
		if err := unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks"); err != nil {
			return nil, err
		}
		items = append(items, obj)
	}
	if len(items) != 2 {
		return nil, fmt.Errorf("want a mutating and a validating webhook configuration, found %d configurations", len(items))
	}
	return items, nil
}

// applyList writes items as a v1 List to path and applies it server-side.
func applyList(ctx context.Context, c *cluster.Cluster, path string, items []any) error {
	data, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return apply(ctx, c, path)
}

// apply applies the file or directory at path server-side: the CRDs are too
// large for client-side apply's last-applied annotation.
func apply(ctx context.Context, c *cluster.Cluster, path string) error {
	if _, _, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "--field-manager="+fieldManager, "-f", path); err != nil {
		return fmt.Errorf("apply %s: %w", filepath.Base(path), err)
	}
	return nil
}
