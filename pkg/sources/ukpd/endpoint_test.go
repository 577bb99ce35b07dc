package ukpd

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		name, in string
		want     EndpointConfig
		// wantSelector is the rendered NodeSelector, if one is expected.
		wantSelector string
	}{
		{name: "URL only", in: "https://10.0.0.5:8443", want: EndpointConfig{URL: "https://10.0.0.5:8443"}},
		{name: "trailing slash and spaces", in: "  http://127.0.0.1:45232/  ", want: EndpointConfig{URL: "http://127.0.0.1:45232"}},
		{name: "path prefix", in: "https://api.example.com/ukpd/", want: EndpointConfig{URL: "https://api.example.com/ukpd"}},
		{name: "IPv6", in: "https://[fd00::5]:8443", want: EndpointConfig{URL: "https://[fd00::5]:8443"}},
		{name: "nodes", in: "https://h;nodes=kraftlet-a, kraftlet-b.example",
			want: EndpointConfig{URL: "https://h", Nodes: []string{"kraftlet-a", "kraftlet-b.example"}}},
		{name: "node selector with commas and equals", in: "https://h;node-selector=unikraft.com/virtual-kubelet=true,pool in (a,b)",
			want: EndpointConfig{URL: "https://h"}, wantSelector: "pool in (a,b),unikraft.com/virtual-kubelet=true"},
		{name: "every option", in: "https://h;nodes=n1;metrics-format=text;token-file=/t/token;ca-file=/c/ca.crt;insecure-skip-tls-verify=false",
			want: EndpointConfig{URL: "https://h", Nodes: []string{"n1"}, MetricsFormat: FormatText, TokenFile: "/t/token", CAFile: "/c/ca.crt"}},
		{name: "insecure", in: "https://h;insecure-skip-tls-verify=true", want: EndpointConfig{URL: "https://h", InsecureSkipTLSVerify: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEndpoint(tc.in)
			must(t, err)
			var sel string
			if got.NodeSelector != nil {
				sel = got.NodeSelector.String()
			}
			if sel != tc.wantSelector {
				t.Errorf("selector = %q, want %q", sel, tc.wantSelector)
			}
			got.NodeSelector = nil
			checkDiff(t, "ParseEndpoint("+tc.in+")", tc.want, got)
		})
	}
}

func TestParseEndpointRoundTrip(t *testing.T) {
	for _, in := range []string{
		"https://h",
		"https://h;nodes=a,b",
		"http://127.0.0.1:1;node-selector=pool=edge,zone!=z1;metrics-format=text;token-file=/t;ca-file=/c;insecure-skip-tls-verify=true",
	} {
		ep, err := ParseEndpoint(in)
		must(t, err)
		again, err := ParseEndpoint(ep.String())
		must(t, err)
		if ep.String() != again.String() {
			t.Errorf("%q renders as %q, then as %q", in, ep.String(), again.String())
		}
	}
}

func TestParseEndpointRejects(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{name: "empty", in: "", wantErr: "empty URL"},
		{name: "options only", in: ";nodes=a", wantErr: "empty URL"},
		{name: "no scheme", in: "10.0.0.5:8443", wantErr: "scheme must be http or https"},
		{name: "other scheme", in: "unix:///run/ukpd.sock", wantErr: "scheme must be http or https"},
		{name: "no host", in: "https:///v1", wantErr: "no host"},
		{name: "port out of range", in: "https://h:70000", wantErr: "out of range"},
		{name: "credentials", in: "https://admin:hunter2@h", wantErr: "credentials in the URL"},
		{name: "query", in: "https://h/?token=x", wantErr: "query or fragment"},
		{name: "fragment", in: "https://h/#x", wantErr: "query or fragment"},
		{name: "malformed", in: "https://h:port/%zz", wantErr: "malformed URL"},
		{name: "option without value", in: "https://h;nodes=", wantErr: "option nodes has no value"},
		{name: "option without equals", in: "https://h;nodes", wantErr: `option "nodes" is not key=value`},
		{name: "empty option", in: "https://h;", wantErr: `option "" is not key=value`},
		{name: "unknown option", in: "https://h;node=a", wantErr: `unknown option "node"`},
		{name: "repeated option", in: "https://h;nodes=a;nodes=b", wantErr: "option nodes given twice"},
		{name: "nodes and selector", in: "https://h;nodes=a;node-selector=x=y", wantErr: "not both"},
		{name: "bad node name", in: "https://h;nodes=Node_A", wantErr: `"Node_A" is not a node name`},
		{name: "empty node name", in: "https://h;nodes=a,,b", wantErr: `"" is not a node name`},
		{name: "repeated node", in: "https://h;nodes=a,a", wantErr: `"a" given twice`},
		{name: "bad selector", in: "https://h;node-selector=a==b==c", wantErr: "node-selector"},
		{name: "bad format", in: "https://h;metrics-format=xml", wantErr: `"xml" is neither json nor text`},
		{name: "bad bool", in: "https://h;insecure-skip-tls-verify=yes please", wantErr: "is not true or false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEndpoint(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseEndpoint(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q reveals the password", err)
			}
		})
	}
}

func TestValidateEndpoints(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"pool": "a"})
	tests := []struct {
		name string
		eps  []EndpointConfig
		want []string
	}{
		{name: "one default", eps: []EndpointConfig{{URL: "https://a"}}},
		{name: "partitioned", eps: []EndpointConfig{{URL: "https://a", Nodes: []string{"n1"}}, {URL: "https://b", NodeSelector: sel}, {URL: "https://c"}}},
		{name: "two defaults and a repeat", eps: []EndpointConfig{{URL: "https://a"}, {URL: "https://b"}, {URL: "https://a", Nodes: []string{"n"}}},
			want: []string{"endpoint https://a is given twice", "more than one ukpd endpoint uses the default node selector"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateEndpoints(tc.eps)
			if len(errs) != len(tc.want) {
				t.Fatalf("ValidateEndpoints = %v, want %d errors", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %v, want one containing %q", i, errs[i], w)
				}
			}
			if err := errors.Join(errs...); (err != nil) != (len(tc.want) > 0) {
				t.Errorf("joined error = %v", err)
			}
		})
	}
}

func TestParseRequiredTag(t *testing.T) {
	tests := []struct {
		in, wantErr string
	}{
		{in: "cluster=prod-eu"},
		{in: "k8s.io:cluster=a=b"},
		{in: "cluster", wantErr: "want key=value"},
		{in: "=x", wantErr: "want key=value"},
		{in: "cluster=", wantErr: "want key=value"},
		{in: "cluster=a b", wantErr: "the platform keeps"},
		{in: "cluster=" + string(make([]byte, 300)), wantErr: "the platform keeps"},
	}
	for _, tc := range tests {
		got, err := ParseRequiredTag(tc.in)
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.in):
			t.Errorf("ParseRequiredTag(%q) = %q, %v", tc.in, got, err)
		case tc.wantErr != "":
			checkErr(t, err, tc.wantErr, sources.ReasonOther)
		}
	}
}
