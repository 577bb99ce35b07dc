// Package promscrape is the pod-endpoint source: it scrapes the Prometheus
// endpoints of pods that opt in (annotations, or a configured selector)
// and of node exporters whose series name their pod by label (NVIDIA's
// DCGM exporter), keeps only the allow-listed metric families of its
// configuration file, turns counters into rates, and combines group
// members' values (sum, mean, max) by the rules the HPA applies to pods.
//
// Text is parsed with prometheus/common's expfmt. Before it, a hand-written
// line filter drops every line of a family that is not allow-listed, so
// those families are never parsed nor stored: on a target of 20
// allow-listed series among about 500 others, expfmt on the whole body took
// 4.74 ms and 430 KB, expfmt's streaming decoder 1.72 ms, and the filter
// then expfmt 0.32 ms and 47 KB (go test -bench . ./pkg/sources/promscrape/,
// docs/bench/2026-12-03-promscrape.txt). FuzzFilterMatchesFullParse holds
// the filter to expfmt's reading of the whole body. The filter also drops
// sample lines that name no metric, which expfmt would add to the series
// read before them.
//
// The server runs it with --pod-metrics-config (pkg/podvalues keeps the
// latest values, pkg/provider serves them on custom.metrics.k8s.io); see
// docs/inference-autoscaling.md.
package promscrape
