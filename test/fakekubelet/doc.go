// Package fakekubelet runs a fleet of fake kubelets on 127.0.0.1 for tests.
//
// Every Node has its own TLS listener and serves the two read paths a
// metrics pipeline uses: GET /stats/summary (Summary API JSON) and
// GET /metrics/resource (Prometheus text). Both are rendered from one
// snapshot, so a consumer of either path sees the same numbers for the same
// sample instant.
//
// Usage is driven by the test. Each container has a CPU rate (nanocores) and
// a working set (bytes); CPU counters integrate the rate over clock time. Sample
// instants are quantised to Config.SampleInterval (one second by default) so
// that the second-precision timestamps of the Summary API and the millisecond
// timestamps of the Prometheus text name the same instant. A usage change takes
// effect from the current sample instant.
//
// Faults (slow responses, errors, garbage, huge bodies, resets, stalls, dead
// listeners, counter resets) can be set and cleared per node at run time.
//
// In library mode pods are placed with Fleet.SetPod; in cluster mode
// Fleet.StartPodInformer follows Running pods bound to the fleet's nodes.
package fakekubelet
