// Package hpacalc holds a test that runs the HPA's own replica calculator
// (k8s.io/kubernetes v1.37.2, pkg/controller/podautoscaler) twice on seeded
// LeaderWorkerSet scenarios: once on the leaders with the values this
// server serves under the group policy, once on every pod with its raw
// usage, as one Deployment would present them. It is a module of its own so
// that the main module never depends on k8s.io/kubernetes.
package hpacalc
