// Package monitoring checks the monitoring kit (manifests/components/monitoring)
// with Prometheus's own parsers and engine, and holds pkg/group's histogram
// quantile to Prometheus's histogram_quantile. It is a module of its own so
// that Prometheus's dependencies stay out of the server's.
package monitoring
