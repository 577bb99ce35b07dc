// Package hpacalc runs the HPA's own replica calculator (k8s.io/kubernetes
// v1.37.2, pkg/controller/podautoscaler) on seeded LeaderWorkerSet scenarios,
// on the leaders with what this server serves under the group policy against
// every pod with its raw usage. It is a module of its own so that the main
// module never depends on k8s.io/kubernetes.
package hpacalc
