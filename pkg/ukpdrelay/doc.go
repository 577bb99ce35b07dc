// Package ukpdrelay is the ukpd relay (group-metrics-server ukpd-relay): it
// serves, over TLS and to identities the cluster authorizes, the two reads
// of ukpd's platform API the server needs, which it makes on loopback with
// ukpd's own token.
//
// # Why
//
// Self-hosted ukpd serves plain HTTP on 127.0.0.1:45232 of each host, behind
// a bearer token. The server runs as a Deployment, so it cannot reach a
// loopback address on another host, and binding ukpd to a routable address
// would send its token over the network in clear to whoever can listen. The
// relay runs on each host that runs kraftlet (a DaemonSet on the host's
// network), and keeps ukpd's token on the host: it reads it from a file
// there and sends it only to the loopback URL it is given (ParseUpstream
// refuses any other host).
//
// # Who may read
//
// As the kubelet admits readers of its /stats: a bearer token is checked by
// a TokenReview, and its identity must be allowed to get nodes/stats of the
// relay's node (Config.NodeName, the host's kraftlet node), asked by a
// SubjectAccessReview; /metrics asks for nodes/metrics instead. These are
// the kubelet's attributes (kubernetes pkg/kubelet/server/auth.go,
// GetRequestAttributes) and the delegating authenticator and authorizer of
// k8s.io/apiserver (pkg/authentication/authenticatorfactory,
// pkg/authorization/authorizerfactory), with the kubelet's cache lifetimes
// (its configuration defaults: 2 minutes for a token, 5 for an allowed and
// 30 seconds for a denied request). So the server reads the relay with the
// ServiceAccount token and the nodes/stats grant it already has for
// kubelets (manifests/base/rbac.yaml), and the relay's own ServiceAccount
// needs only system:auth-delegator, to create the reviews. A request that
// is not authenticated is answered 401, one not allowed 403, and neither
// reaches ukpd; /healthz answers anyone.
//
// # What is relayed
//
// Only what pkg/sources/ukpd/client.go sends: GET /v1/instances with count
// (1 to MaxCount) and from (an instance's UUID), and GET
// /v1/instances/metrics without a query. Any other path is 404, any other
// method 405, any other query 400. The request to ukpd is built anew from
// the base URL, the constant path and the checked query: it carries ukpd's
// token and the sender's Accept, and nothing else of the sender's, its
// Authorization least of all. The answer's status, Content-Type and body
// are copied back, with these exceptions, each a 502 whose message says
// why:
//
//   - a redirect, which is not followed (sources.NoRedirects), so ukpd's
//     token cannot be taken to the Location it names;
//   - 401 or 403 from ukpd, which would read as the relay refusing the
//     server while it is ukpd refusing the relay's token;
//   - a body over the cap the server's ukpd client keeps
//     (ukpd.DefaultMaxResponseBytes): the server would refuse it anyway;
//   - no answer (504 when none came within Config.Timeout).
//
// The body is read whole before it is answered, so that an answer over the
// cap is a 502 and not a cut body; Config.MaxInFlight bounds how many are
// held at once. The relay's own errors are ukpd's error envelope
// ({"status":"error","message":...}), which the server's ukpd client quotes
// in the error it logs. ukpd's token appears in no answer, error or log:
// ukpd.TokenFile never quotes it.
//
// The server finds the relays with --ukpd-relay-port
// (pkg/sources/ukpd/relay.go): one target per kraftlet node, at the node's
// address, sent the server's own credential. The relay admits bearer
// tokens only: a server whose kubeconfig holds a client certificate is
// refused.
package ukpdrelay
