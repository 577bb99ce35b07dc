// Package kubelet reads CPU and memory from each node's kubelet: its Summary
// API by default, or its resource metrics endpoint (EndpointResource, what
// metrics-server reads; resource.go), whose sample times are exact to the
// millisecond rather than the second.
//
// A Summary is read by a small validating JSON reader of this package
// (jsonread.go) rather than by encoding/json into k8s.io/kubelet's own
// Summary type, because decoding is most of a scrape cycle's cost.
// BenchmarkDecode has both on one node's Summary of 30 pods × 2
// containers (2026-12-05, go1.27.3, medians of 6,
// docs/bench/2026-12-05-kubelet-decode.txt): the reader 75 µs, 16.7 KB,
// 135 allocations; the kubelet's types 270 µs, 72 KB, 1,298 allocations.
// At 500 nodes the difference is about 0.1 CPU-second a cycle, half of
// what a whole cycle costs with the reader. The differential tests and
// FuzzDecodeMatchesEncodingJSON hold the reader to what encoding/json and
// the kubelet's types read from the same bytes (decode_reference_test.go).
//
// Likewise the resource endpoint's text, when it is in the plain form the
// kubelet writes, is read by a reader of that form (resourceread.go) rather
// than by expfmt, which reads any other text: on the same node, 0.20 ms and
// 234 allocations against expfmt's 0.84 ms and 8,176 (BenchmarkDecode,
// 2026-12-06, docs/bench/2026-12-06-kubelet-resource-reader.txt). Through
// expfmt, ours on that endpoint cost more CPU a scrape cycle than
// metrics-server (docs/benchmarks.md). FuzzResourceReaderMatchesExpfmt holds
// the reader to expfmt.
package kubelet

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// ClientConfig says how to reach and authenticate to kubelets.
type ClientConfig struct {
	// REST carries TLS and credentials: CA, client certificate, bearer token
	// (or token file, re-read as it rotates). Its Host is ignored.
	REST *rest.Config
	// MaxResponseBytes caps a response; a larger one is an error.
	MaxResponseBytes int64
	// Endpoint is the endpoint read; empty means EndpointSummary.
	Endpoint Endpoint
}

// Endpoint is a kubelet endpoint the client can read.
type Endpoint string

const (
	// EndpointSummary is GET /stats/summary?only_cpu_and_memory=true, which
	// the kubelet authorizes as get nodes/stats.
	EndpointSummary Endpoint = "summary"
	// EndpointResource is GET /metrics/resource, which the kubelet
	// authorizes as get nodes/metrics (k8s.io/kubernetes v1.37.2
	// pkg/kubelet/server/auth.go, GetRequestAttributes).
	EndpointResource Endpoint = "resource"
)

// Endpoints are the values of ClientConfig.Endpoint.
var Endpoints = []Endpoint{EndpointSummary, EndpointResource}

// request is how an endpoint is asked for and its answer read; received
// is when the answer arrived.
type request struct {
	path, query, accept string
	decode              func(ctx context.Context, node string, body []byte, received time.Time) (*sources.Batch, error)
}

var requests = map[Endpoint]request{
	EndpointSummary: {path: "/stats/summary", query: "only_cpu_and_memory=true", accept: "application/json",
		decode: func(ctx context.Context, node string, body []byte, _ time.Time) (*sources.Batch, error) {
			return DecodeContext(ctx, node, body)
		}},
	EndpointResource: {path: "/metrics/resource", accept: resourceAccept, decode: DecodeResource},
}

// resourceAccept asks for the text format, and takes anything: a server
// that negotiates (the kubelet's) answers text, and one that cannot name its
// type must not refuse. kwok's simulated /metrics/resource is a go-restful
// route that declares none, and go-restful answers 406 to an Accept without
// */* there (github.com/emicklei/go-restful/v3 v3.13.0 route.go,
// matchesAccept). metrics-server sends no Accept at all.
const resourceAccept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Client fetches the configured endpoint of kubelets. It is safe for
// concurrent use.
type Client struct {
	http     *http.Client
	maxBytes int64
	endpoint Endpoint
	request  request
	hints    hinter
}

// NewClient builds a Client with its own connection pool. It speaks
// HTTP/1.1 unless cfg.REST names protocols: one request at a time goes to
// each kubelet, and an idle HTTP/2 connection holds its frame buffers,
// about 50 KB per node in the heap profile of a 500-node cluster, where an
// HTTP/1.1 one holds two 4 KB buffers (docs/benchmarks.md).
func NewClient(cfg ClientConfig) (*Client, error) {
	restCfg := rest.CopyConfig(cfg.REST)
	if len(restCfg.NextProtos) == 0 {
		restCfg.NextProtos = []string{"http/1.1"}
	}
	restCfg.Wrap(smallBuffers)
	endpoint := cmp.Or(cfg.Endpoint, EndpointSummary)
	req, ok := requests[endpoint]
	if !ok {
		return nil, fmt.Errorf("kubelet endpoint %q: want one of %q", cfg.Endpoint, Endpoints)
	}
	rt, err := rest.TransportFor(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet transport: %w", err)
	}
	return &Client{http: &http.Client{Transport: rt, CheckRedirect: sources.NoRedirects}, maxBytes: cfg.MaxResponseBytes, endpoint: endpoint, request: req}, nil
}

// Buffer sizes of a kubelet connection. Each kubelet keeps one connection
// open between scrapes, and net/http gives every connection a read and a
// write buffer of 4 KB: 4 MB at 500 nodes (docs/benchmarks.md). A request
// is its headers with a service-account token, under 2 KB; the response's
// headers are a few hundred bytes, and its body is read past the buffer
// into the caller's (bufio reads a large read straight through).
const (
	readBufferSize  = 1 << 10
	writeBufferSize = 2 << 10
)

// smallBuffers gives client-go's transport, when it is a *http.Transport,
// the buffer sizes above. It clones it: client-go shares a transport
// between configs of the same TLS settings.
func smallBuffers(rt http.RoundTripper) http.RoundTripper {
	t, ok := rt.(*http.Transport)
	if !ok {
		return rt
	}
	t = t.Clone()
	t.ReadBufferSize, t.WriteBufferSize = readBufferSize, writeBufferSize
	return t
}

// maxResourcePathBytes bounds a node's resource metrics path: kwok's,
// /metrics/nodes/<name>/metrics/resource, is under 300 bytes for the
// longest node name.
const maxResourcePathBytes = 1 << 10

// Scrape returns the decoded endpoint of node at host (host:port), always
// over HTTPS: kubelets serve their API on TLS only, and tests reach the fake
// kubelets through certificates of test/pki. resourcePath is the node's
// podcache.ResourceMetricsPathAnnotation, "" when it has none: read in place
// of /metrics/resource, as metrics-server reads it (a path without its
// leading slash gets one); the Summary endpoint ignores it and says so once.
func (c *Client) Scrape(ctx context.Context, node, host, resourcePath string) (*sources.Batch, error) {
	r := c.request
	if resourcePath != "" {
		if c.endpoint != EndpointResource {
			if c.hints.first("resource-metrics-path") {
				klog.InfoS("A node names the path of its resource metrics; the server reads it only with --kubelet-endpoint=resource (logged once)",
					"node", node, "annotation", podcache.ResourceMetricsPathAnnotation, "path", resourcePath, "endpoint", c.endpoint)
			}
		} else if len(resourcePath) > maxResourcePathBytes {
			return nil, sources.WithReason(sources.ReasonOther, fmt.Errorf("scrape node %q: its annotation %s is %d bytes long, more than %d",
				node, podcache.ResourceMetricsPathAnnotation, len(resourcePath), maxResourcePathBytes))
		} else {
			r.path = "/" + strings.TrimPrefix(resourcePath, "/")
		}
	}
	u := url.URL{Scheme: "https", Host: host, Path: r.path, RawQuery: r.query}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("scrape node %q: %w", node, err)
	}
	req.Header.Set("Accept", r.accept)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, sources.WithReason(sources.TransportReason(err), fmt.Errorf("scrape node %q: %w", node, c.hints.withHint(node, host, err)))
	}
	defer func() {
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return nil, sources.WithReason(sources.ReasonHTTPStatus,
			fmt.Errorf("scrape node %q: %s returned %s%s", node, u.Path, resp.Status, refusal(resp.Body)))
	}
	// Decode keeps nothing of the body: the buffer is reused.
	var (
		batch     *sources.Batch
		decodeErr error
	)
	received := time.Now()
	if err := sources.ReadCappedTo(resp.Body, c.maxBytes, func(body []byte) error {
		batch, decodeErr = r.decode(ctx, node, body, received)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("scrape node %q: %w", node, err)
	}
	return batch, decodeErr
}

// maxRefusalBytes bounds how much of a refusal's body an error quotes.
const maxRefusalBytes = 256

// refusal is the first line of a non-200 answer's body, quoted and cut to
// maxRefusalBytes, after ": "; "" when the body is empty. A kubelet that
// refuses the server's identity says which grant it lacks: "Forbidden
// (user=…, verb=get, resource=nodes, subresource(s)=[stats])", or
// [metrics] for /metrics/resource
// (k8s.io/kubernetes pkg/kubelet/server/server.go, InstallAuthFilter).
func refusal(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxRefusalBytes+1))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if line == "" {
		return ""
	}
	return ": " + strconv.Quote(strings.TrimSpace(sources.Clip(line, maxRefusalBytes)))
}
