// Package podcache owns the server's pod and node caches: it runs the two
// informers, turns every object into its own small immutable Pod or Node
// (the informers' transform, so the cache holds no API objects), and keeps
// the indexes readers need. A third informer watches the metadata of the
// LeaderWorkerSet StatefulSets (namespace, name, UID and controller
// reference are kept), against which the pod index verifies group
// membership (membership.go). The provider, the kubelet source and the ukpd
// source read it through Pods and Nodes and the methods of Pod and Node;
// none of them depends on the shape of a cached object, and nothing else
// starts an informer on pods or nodes.
//
// What a Pod keeps is what the server reads: identity, labels, the
// annotations it reads, node, pod IP, phase, start time, the Ready condition, the
// names of the containers and of the sidecars that run, and the requests
// as the HPA counts them (group.PodRequests, through
// k8s.io/component-helpers), computed once per change of the object as
// integers. The ResourceList maps of the API object were most of a cached
// pod's size. Pods of the same labels share one label map (labelSets), and
// the Ready condition is kept as its status and transition time:
// BenchmarkPodCacheMemory measures what a pod costs. A Pod also carries
// one memo slot (Pod.SetMemo), in which the provider keeps the pod's usage
// shaped as the API types for the current sample: it goes with the Pod
// when the cache replaces or drops it, where a map keyed by pod cost a
// hash-trie look-up per pod of a list and needed to hear of every pod that
// left.
//
// Indexes: pods by namespace, sorted by name, so every list comes sorted by
// (namespace, name) as metrics-server v0.8.0 sorts its answers
// (pkg/api/pod.go, getMetrics) without sorting at read time; pods by label
// key and value within a namespace, so the HPA's namespaced selector list
// costs in proportion to the pods carrying the selected value rather than
// to the namespace; and pods by LeaderWorkerSet group (group.Key), of
// which Group returns only the members the LeaderWorkerSet's StatefulSets
// control, checked at every read.
//
// # Why the provider lists, and not the API layer
//
// In metrics-server v0.8.0 (pkg/api/pod.go, pkg/api/interfaces.go) the API
// layer lists pod metadata from its own metadata-only informer, filters it
// by the selectors, and asks the provider for the metrics of the pods it
// is given (GetPodMetrics(pods ...*metav1.PartialObjectMetadata));
// prometheus-adapter reuses that shape. Here the provider needs more of a
// pod than its metadata (requests, readiness, group membership and the
// group's other members) and answers for a leader from pods that the
// request did not select, so with that shape there would be two caches of
// the same pods, or the API layer would hand over objects the provider
// then looks up again. The cache is owned here instead; pkg/apiserver's
// getters keep the list-by-selector shape (ListPodMetrics(namespace,
// labels, fields)), and the provider resolves a selector through this
// package's label index.
package podcache
