package ukpd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// Format is the form in which the metrics endpoint is asked to answer.
type Format string

// The forms of GET /v1/instances/metrics, chosen by the Accept header.
const (
	// FormatJSON asks with "Accept: application/json".
	FormatJSON Format = "json"
	// FormatText asks with "Accept: text/plain" for the Prometheus text
	// exposition format.
	FormatText Format = "text"
)

// DefaultMaxResponseBytes caps a response when ClientConfig leaves it 0.
const DefaultMaxResponseBytes = 64 << 20

// The API paths read, below the endpoint's base URL.
const (
	instancesPath = "/v1/instances"
	metricsPath   = "/v1/instances/metrics"
)

// ClientConfig says how to reach and authenticate to one ukpd endpoint.
type ClientConfig struct {
	// URL is the base URL (http or https, no credentials); the API paths
	// /v1/instances and /v1/instances/metrics are appended to its path.
	URL string
	// TokenFile holds the bearer token. It is read again when it changes.
	// Empty sends no Authorization header.
	TokenFile string
	// CAFile holds the PEM certificates that the server's certificate must
	// chain to; empty means the system roots.
	CAFile string
	// InsecureSkipTLSVerify accepts any server certificate. Only for tests.
	InsecureSkipTLSVerify bool
	// MetricsFormat is the form asked of the metrics endpoint; empty means
	// FormatText, the form the self-hosted deployments scrape, whose
	// entries need no identity but the instance_uuid label. Whatever the
	// server answers is decoded by its content type.
	MetricsFormat Format
	// MaxResponseBytes caps a response; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// RequestTimeout bounds each request on top of the caller's context;
	// 0 means only the caller's context.
	RequestTimeout time.Duration
	// Transport, when set, carries the credential and the TLS settings
	// (as a relay's client does: see RelayConfig), and TokenFile, CAFile
	// and InsecureSkipTLSVerify must be empty.
	Transport http.RoundTripper
}

// Client reads the instance list and instance metrics of one ukpd endpoint.
// It is safe for concurrent use.
type Client struct {
	base     *url.URL
	endpoint string // base URL without credentials, for errors and logs
	http     *http.Client
	token    *TokenFile
	format   Format
	maxBytes int64
	timeout  time.Duration
}

// NewClient builds a Client with its own connection pool.
func NewClient(cfg ClientConfig) (*Client, error) {
	base, err := ParseBaseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	format := cfg.MetricsFormat
	switch format {
	case "":
		format = FormatText
	case FormatJSON, FormatText:
	default:
		return nil, fmt.Errorf("ukpd %s: unknown metrics format %q (want json or text)", base, format)
	}
	if cfg.Transport != nil && (cfg.TokenFile != "" || cfg.CAFile != "" || cfg.InsecureSkipTLSVerify) {
		return nil, fmt.Errorf("ukpd %s: a client with a transport of its own takes no token file, CA file or insecure TLS", base)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipTLSVerify}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ukpd %s: read CA file: %w", base, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ukpd %s: CA file %q holds no PEM certificate", base, cfg.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	transport := cfg.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tlsConfig
		t.MaxIdleConnsPerHost = 2
		transport = t
	}
	c := &Client{
		base:     base,
		endpoint: base.String(),
		http:     &http.Client{Transport: transport, CheckRedirect: sources.NoRedirects},
		format:   format,
		maxBytes: cfg.MaxResponseBytes,
		timeout:  cfg.RequestTimeout,
	}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultMaxResponseBytes
	}
	if cfg.TokenFile != "" {
		c.token = NewTokenFile(cfg.TokenFile)
		if base.Scheme == "http" && !IsLoopback(base.Hostname()) {
			klog.InfoS("Warning: the ukpd bearer token is sent over plain HTTP", "endpoint", c.endpoint)
		}
	}
	return c, nil
}

// String is the endpoint's base URL.
func (c *Client) String() string { return c.endpoint }

// The instance list is read in pages: the API takes count and from (the
// UUID of the first instance to return, inclusive) and lists oldest first,
// and no default page size is published, so one request without count may
// hold only the first page of a large account.
const (
	listPageSize = 100
	// maxListPages bounds one read of the list: 100,000 instances.
	maxListPages = 1000
)

// Instances returns the instance list, read page by page until a page adds
// no instance. On a partial decode failure it returns the entries it could
// read with an error saying what was left out; otherwise a nil list goes
// with a non-nil error. A failed page fails the whole list.
//
// A server that pages by count but ignores from (older versions of the API
// had no pagination) answers the first page again for the second, which
// would end the loop as if the account held one page. When the first page
// was full (the server honoured count, so there may be more) and a later
// one begins where the first did, not at its from, the list is read once
// more without count and from, and returned with an error that says the
// server does not page, so the scrape counts as partial and is logged
// once. A first page short of count is the whole list of a server that
// ignores both (it answers everything), and a page that begins elsewhere,
// as when the instance from names was deleted meanwhile, is read as it
// comes.
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	var (
		all      []Instance
		seen     = map[string]struct{}{}
		problems []error
		from     string
		// first is the first page's first UUID, when that page was full.
		first string
	)
	for page := 0; ; page++ {
		if page == maxListPages {
			return nil, c.errorf(sources.ReasonDecode, "GET %s: more than %d pages of %d instances", instancesPath, maxListPages, listPageSize)
		}
		q := url.Values{"count": {strconv.Itoa(listPageSize)}}
		if from != "" {
			q.Set("from", from)
		}
		body, contentType, err := c.get(ctx, instancesPath, q, "application/json")
		if err != nil {
			return nil, err
		}
		if !isJSON(contentType, body) {
			return nil, c.errorf(sources.ReasonDecode, "GET %s answered %q, not JSON", instancesPath, clip(contentType))
		}
		list, err := DecodeInstances(body)
		if list == nil {
			return nil, c.wrap(err)
		}
		switch {
		case page == 0 && len(list) >= listPageSize:
			first = list[0].UUID
		case page > 0 && first != "" && len(list) > 0 && list[0].UUID == first && from != first:
			return c.unpaginated(ctx, from)
		}
		if err != nil {
			problems = append(problems, c.wrap(err))
		}
		added := 0
		for _, in := range list {
			if _, dup := seen[in.UUID]; dup {
				continue
			}
			seen[in.UUID] = struct{}{}
			all = append(all, in)
			added++
		}
		if added == 0 {
			break
		}
		from = list[len(list)-1].UUID
	}
	if all == nil {
		all = []Instance{}
	}
	return all, errors.Join(problems...)
}

// unpaginated reads the list in one request, after a page that did not begin
// at from.
func (c *Client) unpaginated(ctx context.Context, from string) ([]Instance, error) {
	ignored := fmt.Errorf("GET %s: the page asked from instance %s began again at the first: the server does not page by from, so the list was read in one request, which holds the whole account only if the server sets no page size", instancesPath, clip(from))
	body, contentType, err := c.get(ctx, instancesPath, nil, "application/json")
	if err != nil {
		return nil, errors.Join(ignored, err)
	}
	if !isJSON(contentType, body) {
		return nil, c.errorf(sources.ReasonDecode, "%v; then answered %q, not JSON", ignored, clip(contentType))
	}
	list, err := DecodeInstances(body)
	if list == nil {
		return nil, errors.Join(ignored, c.wrap(err))
	}
	return list, errors.Join(ignored, c.wrap(err))
}

// Metrics returns the metrics of every instance the endpoint reports, in
// the form the server answered. Errors are as for Instances.
func (c *Client) Metrics(ctx context.Context) ([]Sample, error) {
	accept := "application/json"
	if c.format == FormatText {
		accept = "text/plain"
	}
	body, contentType, err := c.get(ctx, metricsPath, nil, accept)
	if err != nil {
		return nil, err
	}
	var samples []Sample
	if isJSON(contentType, body) {
		samples, err = DecodeMetricsJSON(body)
	} else {
		samples, err = decodeMetricsText(ctx, body)
	}
	return samples, c.wrap(err)
}

// get fetches path with the query and returns the body and its content
// type.
func (c *Client) get(ctx context.Context, path string, query url.Values, accept string) ([]byte, string, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", c.errorf(sources.ReasonOther, "GET %s: %w", path, err)
	}
	req.Header.Set("Accept", accept)
	if c.token != nil {
		tok, err := c.token.Token()
		if err != nil {
			return nil, "", c.errorf(sources.ReasonOther, "GET %s: %w", path, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, "", c.errorf(sources.TransportReason(err), "GET %s: %w", path, err)
	}
	defer func() {
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return nil, "", c.errorf(sources.ReasonHTTPStatus, "GET %s returned %s%s", path, resp.Status, statusDetail(resp))
	}
	body, err := sources.ReadCapped(resp.Body, c.maxBytes)
	if err != nil {
		return nil, "", c.errorf(sources.Reason(err), "GET %s: %w", path, err)
	}
	return body, resp.Header.Get("Content-Type"), nil
}

func (c *Client) errorf(reason, format string, args ...any) error {
	return sources.WithReason(reason, fmt.Errorf("ukpd %s: "+format, append([]any{c.endpoint}, args...)...))
}

// wrap names the endpoint in a decode error, keeping its reason.
func (c *Client) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("ukpd %s: %w", c.endpoint, err)
}

// statusDetail says more about a failed request: a hint for 401 and the
// API's own message, if the body is its JSON envelope.
func statusDetail(resp *http.Response) string {
	var detail string
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		detail = " (check the bearer token)"
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var env struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &env) == nil && env.Message != "" {
		detail += ": " + clip(env.Message)
	}
	return detail
}

// isJSON says whether a body is JSON, by its content type or, when that
// says neither JSON nor text, by its first byte.
func isJSON(contentType string, body []byte) bool {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			return true
		case mt == "text/plain" || mt == "application/openmetrics-text":
			return false
		}
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}
