package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	metricsinstall "k8s.io/metrics/pkg/apis/metrics/install"
)

var (
	// Scheme holds the types served on metrics.k8s.io.
	Scheme = runtime.NewScheme()
	// Codecs encodes them as JSON, YAML and protobuf.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	metricsinstall.Install(Scheme)
	// List and get options travel as query parameters in the core "v1".
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}
