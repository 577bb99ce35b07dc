// Package fakeukpd is a fake of ukpd, the Unikraft platform daemon, for
// tests. It serves the two read paths of the platform API that a metrics
// pipeline uses, in the documented wire formats:
//
//   - GET /v1/instances: the instance list in the API's JSON envelope
//     ({"status": "success", "data": {"instances": [...]}}), each instance
//     with the tags kraftlet writes (k8s.io:namespace=, k8s.io:pod=,
//     k8s.io:container=, kraftlet:node=).
//   - GET /v1/instances/metrics (and /v1/instances/{uuid}/metrics): JSON
//     with "Accept: application/json", Prometheus text otherwise.
//
// Every request needs "Authorization: Bearer <token>" with an accepted
// token; anything else gets 401.
//
// Instances are driven by the test: each has a CPU rate in cores, whose
// counter (cpu_time_ms, "since last start") integrates the rate over the
// server's clock, and a resident set. An instance can be restarted
// (start_count+1, new started_at, counter from zero), put in standby
// (reported with state "standby", no resident set), stopped (absent from
// the metrics) or removed. Faults (500, garbage, huge bodies, slow answers)
// can be set per path.
//
// Server is an http.Handler: serve it with httptest.NewServer, or with
// Start (as the fake-ukpd command does) for TLS, transport faults and the
// control API.
package fakeukpd
