package apiserver

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/metrics/pkg/apis/metrics"
)

// podREST serves metrics.k8s.io pods.
type podREST struct{ getter PodMetricsGetter }

var (
	_ rest.Storage              = &podREST{}
	_ rest.KindProvider         = &podREST{}
	_ rest.Scoper               = &podREST{}
	_ rest.Getter               = &podREST{}
	_ rest.Lister               = &podREST{}
	_ rest.SingularNameProvider = &podREST{}
)

func (r *podREST) New() runtime.Object     { return &metrics.PodMetrics{} }
func (r *podREST) NewList() runtime.Object { return &metrics.PodMetricsList{} }
func (r *podREST) Destroy()                {}
func (r *podREST) Kind() string            { return "PodMetrics" }
func (r *podREST) NamespaceScoped() bool   { return true }
func (r *podREST) GetSingularName() string { return "" }
func (r *podREST) ConvertToTable(ctx context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return podTable(obj)
}

func (r *podREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return r.getter.GetPodMetrics(ctx, genericapirequest.NamespaceValue(ctx), name)
}

func (r *podREST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ls, fs := selectors(opts)
	items, err := r.getter.ListPodMetrics(ctx, genericapirequest.NamespaceValue(ctx), ls, fs)
	if err != nil {
		return nil, err
	}
	return &metrics.PodMetricsList{Items: items}, nil
}

// nodeREST serves metrics.k8s.io nodes.
type nodeREST struct{ getter NodeMetricsGetter }

var (
	_ rest.Storage              = &nodeREST{}
	_ rest.KindProvider         = &nodeREST{}
	_ rest.Scoper               = &nodeREST{}
	_ rest.Getter               = &nodeREST{}
	_ rest.Lister               = &nodeREST{}
	_ rest.SingularNameProvider = &nodeREST{}
)

func (r *nodeREST) New() runtime.Object     { return &metrics.NodeMetrics{} }
func (r *nodeREST) NewList() runtime.Object { return &metrics.NodeMetricsList{} }
func (r *nodeREST) Destroy()                {}
func (r *nodeREST) Kind() string            { return "NodeMetrics" }
func (r *nodeREST) NamespaceScoped() bool   { return false }
func (r *nodeREST) GetSingularName() string { return "" }
func (r *nodeREST) ConvertToTable(ctx context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return nodeTable(obj)
}

func (r *nodeREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return r.getter.GetNodeMetrics(ctx, name)
}

func (r *nodeREST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ls, fs := selectors(opts)
	items, err := r.getter.ListNodeMetrics(ctx, ls, fs)
	if err != nil {
		return nil, err
	}
	return &metrics.NodeMetricsList{Items: items}, nil
}

func selectors(opts *metainternalversion.ListOptions) (labels.Selector, fields.Selector) {
	ls, fs := labels.Everything(), fields.Everything()
	if opts != nil {
		if opts.LabelSelector != nil {
			ls = opts.LabelSelector
		}
		if opts.FieldSelector != nil {
			fs = opts.FieldSelector
		}
	}
	return ls, fs
}
