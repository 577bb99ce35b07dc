// Package hpacalc holds tests that run the HPA's own replica calculator
// (k8s.io/kubernetes v1.37.2, pkg/controller/podautoscaler) on seeded
// LeaderWorkerSet scenarios. TestHPACalculatorTwice runs it twice: once on
// the leaders with the values this server serves under the group policy,
// once on every pod with its raw usage, as one Deployment would present
// them. TestThreePathsAgree reads the leaders on the three paths that
// carry a group's value (metrics.k8s.io, the lws_group_* utilization
// metrics and a pod-endpoint metric) and holds each to the one group rule
// and to the decision over every pod. It is a module of its own so that
// the main module never depends on k8s.io/kubernetes.
package hpacalc
