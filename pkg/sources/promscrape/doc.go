// Package promscrape is the pod-endpoint source: its targets, scraped by
// the one scraper of pkg/sources with every other, are the Prometheus
// endpoints of pods that opt in (annotations, or a configured selector)
// and node exporters whose series name their pod by label (NVIDIA's DCGM
// exporter). It keeps only the allow-listed metric families of its
// configuration file and hands them over as named series; the store turns
// counters into rates and the provider combines series and group members
// by pkg/group's rules.
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
// A pod owner controls its annotations, labels and the bytes its endpoint
// serves, so each is bounded before it can cost the server anything, and
// can change only that pod's own values: labels, label bytes and series
// are counted on each line before expfmt reads it (limits.go), decoding
// looks at its context, a target that overruns its timeout is not waited
// for (the scraper's rule), exporters are trusted only from the namespaces the
// operator names and only for pods on their own node (targets.go,
// admit.go). docs/security.md lists every input and its bound.
//
// The label count is hand-written rather than expfmt's because it must
// come before expfmt: expfmt's time grows with the square of a line's
// labels (4 MiB of 256-label lines took it 4.6 s, of 512-label lines 21 s;
// docs/benchmarks.md, BenchmarkDecodeWorstCase), so a hostile line is
// refused before the parser sees it. FuzzCountLabelsNeverUndercounts holds
// the count to what expfmt reads from the same line.
//
// Nothing else is parsed by hand: endpoint pickers' series, histograms'
// parts and ratios' counters all come out of expfmt's families; a picker's
// token file is read whole and trimmed, with no format of its own.
//
// The server runs it with --pod-metrics-config (pkg/store keeps the
// series, pkg/provider serves them on custom.metrics.k8s.io); see
// docs/inference-autoscaling.md.
package promscrape
