// Package certs keeps the server's serving certificate: a CA of its own, a
// serving pair it signs for the server's Service, and the caBundle of the
// server's APIServices, so that the aggregator verifies every replica.
//
// It runs in the certificate controller (group-metrics-server
// cert-controller), an identity of its own that never talks to nodes; the
// serving replicas only read the pair from files, mounted from a Secret, and
// reload it as it changes.
//
// What is kept, and where:
//
//   - the CA Secret (ca.crt/ca.key: the CA that signs; next.crt/next.key: a
//     CA trusted but not yet signing; previous.crt: CAs no longer signing but
//     still trusted), readable by the controller alone;
//   - the serving Secret (tls.crt, tls.key, and ca.crt: every CA trusted),
//     mounted by the serving replicas;
//   - the caBundle of each managed APIService: every CA trusted.
//
// The rules (Plan) make every change safe for a fleet that picks a Secret
// change up some time later, at most Policy.Propagation:
//
//   - The serving pair is replaced when a third of its life remains, by one
//     of the same CA: nothing else changes.
//   - A CA is replaced in two phases: when a third of its life remains a new
//     CA is made and trusted (the caBundle holds both), and only once every
//     APIService holds it and Propagation has passed does it sign; the old
//     CA stays trusted until Propagation after no published pair is its.
//   - Everything follows from what is stored, not from a process's memory,
//     so a second writer (a new leader, or one with a stale view) computes
//     the same next state, and a writer stops writing once it is reached.
package certs
