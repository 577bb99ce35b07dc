package certs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// APIServiceResource is apiregistration.k8s.io/v1 apiservices.
var APIServiceResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// ServiceRef is the Service the managed APIServices point at.
type ServiceRef struct {
	Namespace, Name string
	Port            int32
}

// APIServicesConfig configures APIServices.
type APIServicesConfig struct {
	Client dynamic.Interface
	// Names are the managed APIServices, each <version>.<group>.
	Names   []string
	Service ServiceRef
	// RecreateAfter is how long an APIService must have been missing before
	// it is created again: long enough that an uninstall, which removes the
	// controller's rights first, is not undone.
	RecreateAfter time.Duration
	// Labels and Owner are set on an APIService the controller creates, so
	// that an uninstall removes it with the rest (the owner is a
	// cluster-scoped object of the manifests).
	Labels map[string]string
	Owner  *metav1.OwnerReference
}

// APIServices keeps the caBundle of the managed APIServices, and creates
// them again when something deletes them. Only APIServices that point at
// ServiceRef are written: one that points elsewhere belongs to another
// server (metrics-server, before it is replaced) and is left alone.
type APIServices struct {
	cfg APIServicesConfig
	// missingSince is when each missing APIService was first seen missing.
	missingSince map[string]time.Time
	// elsewhere holds the APIServices last seen pointing elsewhere, so that
	// it is logged once per change.
	elsewhere map[string]string
}

// NewAPIServices returns a keeper of cfg.Names.
func NewAPIServices(cfg APIServicesConfig) *APIServices {
	return &APIServices{cfg: cfg, missingSince: map[string]time.Time{}, elsewhere: map[string]string{}}
}

// Holds says whether every managed APIService that points at the Service
// carries bundle as its caBundle. It writes nothing.
func (a *APIServices) Holds(ctx context.Context, bundle []byte) (bool, error) {
	for _, name := range a.cfg.Names {
		obj, err := a.cfg.Client.Resource(APIServiceResource).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Created again with the bundle the controller writes.
			continue
		case err != nil:
			return false, fmt.Errorf("get apiservice %s: %w", name, err)
		}
		if a.ours(obj) && !carries(obj, bundle) {
			return false, nil
		}
	}
	return true, nil
}

// Sync makes every managed APIService that points at the Service carry
// bundle as its caBundle, without insecureSkipTLSVerify, and creates those
// missing for RecreateAfter.
func (a *APIServices) Sync(ctx context.Context, bundle []byte, now time.Time) error {
	var errs []error
	for _, name := range a.cfg.Names {
		if err := a.syncOne(ctx, name, bundle, now); err != nil {
			klog.ErrorS(err, "Keeping the caBundle failed", "apiservice", name)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (a *APIServices) ours(obj *unstructured.Unstructured) bool {
	ns, _, _ := unstructured.NestedString(obj.Object, "spec", "service", "namespace")
	name, _, _ := unstructured.NestedString(obj.Object, "spec", "service", "name")
	return ns == a.cfg.Service.Namespace && name == a.cfg.Service.Name
}

// carries says whether obj verifies with exactly bundle.
func carries(obj *unstructured.Unstructured, bundle []byte) bool {
	current, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle")
	insecure, _, _ := unstructured.NestedBool(obj.Object, "spec", "insecureSkipTLSVerify")
	decoded, err := base64.StdEncoding.DecodeString(current)
	return err == nil && bytes.Equal(decoded, bundle) && !insecure
}

func (a *APIServices) syncOne(ctx context.Context, name string, bundle []byte, now time.Time) error {
	client := a.cfg.Client.Resource(APIServiceResource)
	obj, err := client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		since, seen := a.missingSince[name]
		if !seen {
			a.missingSince[name] = now
			klog.InfoS("APIService is missing; it is created again if it stays missing", "apiservice", name, "after", a.cfg.RecreateAfter)
			return nil
		}
		if now.Sub(since) < a.cfg.RecreateAfter {
			return nil
		}
		if err := a.create(ctx, name, bundle); err != nil {
			return err
		}
		delete(a.missingSince, name)
		return nil
	case err != nil:
		return fmt.Errorf("get apiservice %s: %w", name, err)
	}
	delete(a.missingSince, name)

	if !a.ours(obj) {
		svcNS, _, _ := unstructured.NestedString(obj.Object, "spec", "service", "namespace")
		svcName, _, _ := unstructured.NestedString(obj.Object, "spec", "service", "name")
		where := svcNS + "/" + svcName
		if a.elsewhere[name] != where {
			klog.InfoS("APIService points at another service; leaving it alone until it points at ours",
				"apiservice", name, "service", where, "ours", a.cfg.Service.Namespace+"/"+a.cfg.Service.Name)
			a.elsewhere[name] = where
		}
		return nil
	}
	delete(a.elsewhere, name)

	if carries(obj, bundle) {
		return nil
	}
	insecure, _, _ := unstructured.NestedBool(obj.Object, "spec", "insecureSkipTLSVerify")
	// insecureSkipTLSVerify goes in the same patch: the API server refuses
	// a caBundle beside it (metrics-server's manifests set it).
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{
		"caBundle":              base64.StdEncoding.EncodeToString(bundle),
		"insecureSkipTLSVerify": nil,
	}})
	if err != nil {
		return err
	}
	if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch apiservice %s: %w", name, err)
	}
	klog.InfoS("Wrote caBundle", "apiservice", name, "cas", len(ParseCerts(bundle)), "insecureSkipTLSVerifyCleared", insecure)
	return nil
}

func (a *APIServices) create(ctx context.Context, name string, bundle []byte) error {
	obj, err := a.template(name, bundle)
	if err != nil {
		return err
	}
	if _, err := a.cfg.Client.Resource(APIServiceResource).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create apiservice %s again: %w", name, err)
	}
	klog.InfoS("Created missing APIService again", "apiservice", name)
	return nil
}

// template is the APIService name as the manifests define it.
func (a *APIServices) template(name string, bundle []byte) (*unstructured.Unstructured, error) {
	version, group, ok := strings.Cut(name, ".")
	if !ok || version == "" || group == "" {
		return nil, fmt.Errorf("apiservice name %q is not <version>.<group>", name)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group":                group,
			"version":              version,
			"groupPriorityMinimum": int64(100),
			"versionPriority":      versionPriority(version),
			"caBundle":             base64.StdEncoding.EncodeToString(bundle),
			"service": map[string]any{
				"namespace": a.cfg.Service.Namespace,
				"name":      a.cfg.Service.Name,
				"port":      int64(a.cfg.Service.Port),
			},
		},
	}}
	obj.SetLabels(a.cfg.Labels)
	if a.cfg.Owner != nil {
		obj.SetOwnerReferences([]metav1.OwnerReference{*a.cfg.Owner})
	}
	return obj, nil
}

// versionPriority ranks the versions of one group as the manifests do: the
// newer version first.
func versionPriority(version string) int64 {
	if strings.Contains(version, "beta") || strings.Contains(version, "alpha") {
		if strings.HasSuffix(version, "beta2") {
			return 200
		}
		return 100
	}
	return 200
}
