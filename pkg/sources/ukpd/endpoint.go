package ukpd

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// EndpointConfig is one ukpd endpoint and the nodes whose pods it reports.
type EndpointConfig struct {
	// URL is the base URL of the platform API, e.g. https://10.0.0.5:8443.
	URL string
	// Nodes names the nodes the endpoint owns. When empty, NodeSelector
	// picks them.
	Nodes []string
	// NodeSelector picks the nodes the endpoint owns from the node lister;
	// nil means the source's default (DefaultNodeSelector).
	NodeSelector labels.Selector
	// MetricsFormat, TokenFile, CAFile and InsecureSkipTLSVerify override
	// the source-wide settings of the same name when set.
	MetricsFormat         Format
	TokenFile             string
	CAFile                string
	InsecureSkipTLSVerify bool
}

// Option keys of an endpoint string.
const (
	optNodes        = "nodes"
	optNodeSelector = "node-selector"
	optFormat       = "metrics-format"
	optTokenFile    = "token-file"
	optCAFile       = "ca-file"
	optInsecure     = "insecure-skip-tls-verify"
)

var optionKeys = []string{optNodes, optNodeSelector, optFormat, optTokenFile, optCAFile, optInsecure}

// ParseEndpoint parses an endpoint string: a URL, optionally followed by
// options separated by ";":
//
//	https://10.0.0.5:8443
//	https://10.0.0.5:8443;nodes=kraftlet-a,kraftlet-b
//	https://10.0.0.5:8443;node-selector=unikraft.com/virtual-kubelet=true,pool=edge
//	https://10.0.0.5:8443;metrics-format=text;token-file=/var/run/ukpd/token;ca-file=/etc/ukpd/ca.crt
//
// nodes and node-selector exclude each other; insecure-skip-tls-verify takes
// true or false.
func ParseEndpoint(s string) (EndpointConfig, error) {
	parts := strings.Split(strings.TrimSpace(s), ";")
	base, err := ParseBaseURL(parts[0])
	if err != nil {
		return EndpointConfig{}, err
	}
	ep := EndpointConfig{URL: base.String()}
	seen := map[string]bool{}
	for _, opt := range parts[1:] {
		key, value, ok := strings.Cut(strings.TrimSpace(opt), "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case !ok || key == "":
			return EndpointConfig{}, fmt.Errorf("endpoint %s: option %q is not key=value (keys: %s)", ep.URL, opt, strings.Join(optionKeys, ", "))
		case seen[key]:
			return EndpointConfig{}, fmt.Errorf("endpoint %s: option %s given twice", ep.URL, key)
		case value == "":
			return EndpointConfig{}, fmt.Errorf("endpoint %s: option %s has no value", ep.URL, key)
		}
		seen[key] = true
		if err := ep.set(key, value); err != nil {
			return EndpointConfig{}, fmt.Errorf("endpoint %s: %w", ep.URL, err)
		}
	}
	if seen[optNodes] && seen[optNodeSelector] {
		return EndpointConfig{}, fmt.Errorf("endpoint %s: give %s or %s, not both", ep.URL, optNodes, optNodeSelector)
	}
	return ep, nil
}

func (ep *EndpointConfig) set(key, value string) error {
	switch key {
	case optNodes:
		for n := range strings.SplitSeq(value, ",") {
			n = strings.TrimSpace(n)
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				return fmt.Errorf("%s: %q is not a node name: %s", optNodes, n, strings.Join(errs, "; "))
			}
			if slices.Contains(ep.Nodes, n) {
				return fmt.Errorf("%s: %q given twice", optNodes, n)
			}
			ep.Nodes = append(ep.Nodes, n)
		}
	case optNodeSelector:
		sel, err := labels.Parse(value)
		if err != nil {
			return fmt.Errorf("%s: %w", optNodeSelector, err)
		}
		ep.NodeSelector = sel
	case optFormat:
		switch f := Format(value); f {
		case FormatJSON, FormatText:
			ep.MetricsFormat = f
		default:
			return fmt.Errorf("%s: %q is neither %s nor %s", optFormat, value, FormatJSON, FormatText)
		}
	case optTokenFile:
		ep.TokenFile = value
	case optCAFile:
		ep.CAFile = value
	case optInsecure:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("%s: %q is not true or false", optInsecure, value)
		}
		ep.InsecureSkipTLSVerify = b
	default:
		return fmt.Errorf("unknown option %q (keys: %s)", key, strings.Join(optionKeys, ", "))
	}
	return nil
}

// String renders the endpoint in the form ParseEndpoint reads.
func (ep EndpointConfig) String() string {
	parts := []string{ep.URL}
	switch {
	case len(ep.Nodes) > 0:
		parts = append(parts, optNodes+"="+strings.Join(ep.Nodes, ","))
	case ep.NodeSelector != nil:
		parts = append(parts, optNodeSelector+"="+ep.NodeSelector.String())
	}
	if ep.MetricsFormat != "" {
		parts = append(parts, optFormat+"="+string(ep.MetricsFormat))
	}
	if ep.TokenFile != "" {
		parts = append(parts, optTokenFile+"="+ep.TokenFile)
	}
	if ep.CAFile != "" {
		parts = append(parts, optCAFile+"="+ep.CAFile)
	}
	if ep.InsecureSkipTLSVerify {
		parts = append(parts, optInsecure+"=true")
	}
	return strings.Join(parts, ";")
}

// ValidateEndpoints returns every problem with a set of endpoints that no
// single one shows: the same URL twice, or several endpoints left to the
// default selector, which would all claim the same nodes.
func ValidateEndpoints(eps []EndpointConfig) []error {
	var errs []error
	urls := map[string]bool{}
	defaults := 0
	for _, ep := range eps {
		if urls[ep.URL] {
			errs = append(errs, fmt.Errorf("endpoint %s is given twice", ep.URL))
		}
		urls[ep.URL] = true
		if len(ep.Nodes) == 0 && ep.NodeSelector == nil {
			defaults++
		}
	}
	if defaults > 1 {
		errs = append(errs, errors.New("more than one ukpd endpoint uses the default node selector; give each its own nodes= or node-selector="))
	}
	return errs
}

// ParseBaseURL checks a base URL: http or https, a host, no credentials,
// query or fragment. The result has no trailing slash. Its errors never
// quote credentials the URL holds.
func ParseBaseURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("ukpd endpoint: empty URL")
	}
	if !strings.Contains(s, "://") {
		return nil, errors.New("ukpd endpoint: scheme must be http or https (want http://host:port or https://host:port)")
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Error quotes the input, which may hold credentials.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("ukpd endpoint: malformed URL: %w", err)
	}
	redacted := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("ukpd endpoint %s: scheme must be http or https", redacted)
	case u.User != nil:
		return nil, fmt.Errorf("ukpd endpoint %s: credentials in the URL are not supported; use a token file", redacted)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("ukpd endpoint %s: no host", redacted)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("ukpd endpoint %s: a query or fragment is not supported", redacted)
	case u.Opaque != "":
		return nil, fmt.Errorf("ukpd endpoint %s: not a hierarchical URL", u.Scheme+":")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("ukpd endpoint %s: port %q is out of range", redacted, p)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// IsLoopback says whether a URL's host name is localhost or a loopback
// address: a token sent there in plain HTTP does not leave the host.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
