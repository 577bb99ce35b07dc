package certs

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// CABundleWriter keeps the caBundle of the named APIServices equal to a CA.
type CABundleWriter struct {
	Client dynamic.Interface
	Names  []string
	CA     []byte
}

// Sync writes the CA into every named APIService whose caBundle differs.
// An APIService that does not exist yet is skipped; the next Sync tries
// again.
func (w *CABundleWriter) Sync(ctx context.Context) error {
	var firstErr error
	for _, name := range w.Names {
		if err := w.syncOne(ctx, name); err != nil {
			klog.ErrorS(err, "Writing caBundle failed", "apiservice", name)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

func (w *CABundleWriter) syncOne(ctx context.Context, name string) error {
	obj, err := w.Client.Resource(apiServices).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get apiservice %s: %w", name, err)
	}
	current, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle")
	if decoded, err := base64.StdEncoding.DecodeString(current); err == nil && bytes.Equal(decoded, w.CA) {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"caBundle":%q}}`, base64.StdEncoding.EncodeToString(w.CA))
	if _, err := w.Client.Resource(apiServices).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch apiservice %s: %w", name, err)
	}
	klog.InfoS("Wrote caBundle", "apiservice", name)
	return nil
}

// Run syncs now and then every interval until ctx is done, so a re-applied
// manifest gets its caBundle back.
func (w *CABundleWriter) Run(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) { _ = w.Sync(ctx) }, interval)
}
