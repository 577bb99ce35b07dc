// Package fakeukpd is a fake of ukpd, the Unikraft platform daemon, for
// tests: it serves the two read paths of the platform API a metrics
// pipeline uses, GET /v1/instances and GET /v1/instances/metrics (JSON or
// Prometheus text), in the documented wire formats, to bearer tokens it
// accepts. The test drives its instances (CPU rate, resident set,
// restarts, standby, stop) and faults; README.md says how.
//
// Server is an http.Handler: serve it with httptest.NewServer, or with
// Start (as the fake-ukpd command does) for TLS, transport faults and the
// control API.
package fakeukpd
