// Package monitoring checks the monitoring kit (manifests/components/monitoring)
// with Prometheus's own parsers: every rule of the PrometheusRule parses as a
// Prometheus rule file (model/rulefmt), every expression of a rule or a
// dashboard panel parses as PromQL (promql/parser), and the metric names they
// use are exactly those listed in metric-names.txt beside the kit. The main
// module's tests (pkg/server, pkg/certs) check that every listed name is in
// the /metrics output of a running server and certificate controller. It also
// holds pkg/group's histogram quantile to Prometheus's histogram_quantile
// (promql.BucketQuantile). It is a module of its own so that Prometheus's
// dependencies stay out of the server's.
package monitoring
