// Package apiserver serves metrics.k8s.io (v1 and v1beta1) and, when a
// custom metrics provider is given, custom.metrics.k8s.io, on a
// k8s.io/apiserver generic server with delegated authentication and
// authorization. It knows the data only through the getter interfaces.
//
// One piece is written by hand: the JSON of the metrics.k8s.io lists
// (encode.go), because BenchmarkListHandler showed encoding/json's
// reflection to be most of a list's cost (15,000 pods: 62 ms against 19 ms;
// the HPA's 30-pod selector list: 1,044 allocations against 337). A differential test and a fuzz target hold it to encoding/json's
// bytes; everything it does not know goes to the standard serializer.
package apiserver

import (
	"errors"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/metrics/pkg/apis/metrics"
	metricsv1 "k8s.io/metrics/pkg/apis/metrics/v1"
	"k8s.io/metrics/pkg/apis/metrics/v1beta1"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"
	cmopenapicore "sigs.k8s.io/custom-metrics-apiserver/pkg/generated/openapi/core"
	cmopenapi "sigs.k8s.io/custom-metrics-apiserver/pkg/generated/openapi/custommetrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	generatedopenapi "github.com/group-metrics-server/group-metrics-server/pkg/generated/openapi"
)

// Name is the server's name in OpenAPI and logs.
const Name = "group-metrics-server"

// Config is what the API layer needs.
type Config struct {
	// Generic has secure serving, authentication and authorization applied.
	Generic *genericapiserver.RecommendedConfig
	Pods    PodMetricsGetter
	Nodes   NodeMetricsGetter
	// CustomMetrics, when not nil, is served on custom.metrics.k8s.io.
	CustomMetrics cmprovider.CustomMetricsProvider
	// Reads bounds the metrics API requests served at once.
	Reads ReadLimit
}

type completedConfig struct {
	generic       cmapiserver.CompletedConfig
	pods          PodMetricsGetter
	nodes         NodeMetricsGetter
	customMetrics cmprovider.CustomMetricsProvider
}

// CompletedConfig can only be made by Complete.
type CompletedConfig struct{ *completedConfig }

// Complete fills in OpenAPI and version information.
func (c *Config) Complete() CompletedConfig {
	roots := []openapicommon.GetOpenAPIDefinitions{generatedopenapi.GetOpenAPIDefinitions}
	if c.CustomMetrics != nil {
		roots = append(roots, customMetricsDefinitions)
	}
	getDefs := mergeDefinitions(roots, cmopenapicore.GetOpenAPIDefinitions)
	namer := openapinamer.NewDefinitionNamer(Scheme, cmapiserver.Scheme)
	g := &c.Generic.Config
	if g.OpenAPIConfig == nil {
		g.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(getDefs, namer)
		g.OpenAPIConfig.Info.Title = Name
		g.OpenAPIConfig.Info.Version = "1.0.0"
	}
	if g.OpenAPIV3Config == nil {
		g.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(getDefs, namer)
		g.OpenAPIV3Config.Info.Title = Name
		g.OpenAPIV3Config.Info.Version = "1.0.0"
	}
	if c.Reads.Concurrent > 0 {
		chain := g.BuildHandlerChainFunc
		if chain == nil {
			chain = genericapiserver.DefaultBuildHandlerChain
		}
		// Inside the chain: a request is authenticated and authorized
		// before it takes a slot.
		g.BuildHandlerChainFunc = func(h http.Handler, cfg *genericapiserver.Config) http.Handler {
			return chain(c.Reads.wrap(h), cfg)
		}
	}
	cm := cmapiserver.Config{GenericConfig: g}
	return CompletedConfig{&completedConfig{
		generic:       cm.Complete(c.Generic.SharedInformerFactory),
		pods:          c.Pods,
		nodes:         c.Nodes,
		customMetrics: c.CustomMetrics,
	}}
}

// customMetricsDefinitions are the definitions of custom.metrics.k8s.io's
// own types: custom-metrics-apiserver generates them together with all of
// core/v1, which its core package holds alone.
func customMetricsDefinitions(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
	defs := cmopenapi.GetOpenAPIDefinitions(ref)
	for name := range cmopenapicore.GetOpenAPIDefinitions(ref) {
		delete(defs, name)
	}
	return defs
}

// mergeDefinitions returns the roots' definitions and, of the pool's, those
// the roots depend on, directly or not. The pool is custom-metrics-apiserver's
// definitions of all of core/v1, of which custom.metrics.k8s.io needs a few
// (ObjectReference) and metrics.k8s.io none: kept whole, they were 5.5 MB
// of a 500-node server's live heap (docs/benchmarks.md).
func mergeDefinitions(roots []openapicommon.GetOpenAPIDefinitions, pool openapicommon.GetOpenAPIDefinitions) openapicommon.GetOpenAPIDefinitions {
	return func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		out := map[string]openapicommon.OpenAPIDefinition{}
		var wanted []string
		for _, get := range roots {
			for k, v := range get(ref) {
				out[k] = v
				wanted = append(wanted, v.Dependencies...)
			}
		}
		all := pool(ref)
		for len(wanted) > 0 {
			name := wanted[len(wanted)-1]
			wanted = wanted[:len(wanted)-1]
			if _, done := out[name]; done {
				continue
			}
			if d, ok := all[name]; ok {
				out[name] = d
				wanted = append(wanted, d.Dependencies...)
			}
		}
		return out
	}
}

// New builds the generic API server with the metrics APIs installed.
func (c CompletedConfig) New() (*genericapiserver.GenericAPIServer, error) {
	if c.pods == nil || c.nodes == nil {
		return nil, errors.New("apiserver: pod and node metrics getters are required")
	}
	s, err := c.generic.New(Name, c.customMetrics, nil)
	if err != nil {
		return nil, err
	}
	info := genericapiserver.NewDefaultAPIGroupInfo(metrics.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	info.NegotiatedSerializer = withFastJSON(info.NegotiatedSerializer)
	storage := map[string]rest.Storage{
		"pods":  &podREST{getter: c.pods},
		"nodes": &nodeREST{getter: c.nodes},
	}
	info.VersionedResourcesStorageMap[metricsv1.SchemeGroupVersion.Version] = storage
	info.VersionedResourcesStorageMap[v1beta1.SchemeGroupVersion.Version] = storage
	if err := s.GenericAPIServer.InstallAPIGroup(&info); err != nil {
		return nil, err
	}
	return s.GenericAPIServer, nil
}
