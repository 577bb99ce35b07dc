package options

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		set   func(o *Options)
		wants []string // substrings, one per expected error
	}{
		{name: "defaults", set: func(*Options) {}},
		{name: "resolution at the floor", set: func(o *Options) { o.MetricResolution = 5 * time.Second; o.KubeletRequestTimeout = 4 * time.Second }},
		{name: "every problem is reported",
			set: func(o *Options) {
				o.MetricResolution, o.KubeletPort, o.NodeSelector = time.Second, 70000, "a in ("
				o.KubeletPreferredAddressTypes = []string{"InternalIP", "Carrier-Pigeon"}
				o.KubeletInsecureTLS, o.KubeletCAFile, o.KubeletClientCertFile = true, "/ca.crt", "/c.crt"
				o.MaxConcurrentScrapes, o.MaxConcurrentReads, o.KubeletMaxResponseBytes = 0, -1, 10
			},
			wants: []string{"--metric-resolution must be at least 5s",
				"--kubelet-request-timeout must be positive and below --metric-resolution",
				"--max-concurrent-scrapes", "--max-concurrent-reads", "--kubelet-max-response-bytes",
				"--kubelet-port must be between 1 and 65535", `unknown type "Carrier-Pigeon"`, "exclude each other", "go together",
				"--node-selector"}},
		{name: "ukpd endpoints", set: func(o *Options) {
			o.Sources = []string{"kubelet", "ukpd"}
			o.UkpdEndpoints = []string{"https://10.0.0.5:8443;nodes=k1", "https://10.0.0.6:8443;node-selector=zone=b"}
		}},
		{name: "ukpd without endpoints", set: func(o *Options) { o.Sources = []string{"ukpd"} }, wants: []string{"needs at least one --ukpd-endpoint"}},
		{name: "endpoint without ukpd", set: func(o *Options) { o.UkpdEndpoints = []string{"https://x"} }, wants: []string{"does not name ukpd"}},
		{name: "ukpd by relays alone", set: func(o *Options) { o.Sources = []string{"ukpd"}; o.UkpdRelayPort = 45242 }},
		{name: "relays without ukpd", set: func(o *Options) { o.UkpdRelayPort = 45242 }, wants: []string{"--ukpd-relay-port is set but --sources does not name ukpd"}},
		{name: "relay port out of range", set: func(o *Options) { o.Sources = []string{"ukpd"}; o.UkpdRelayPort = 70000 }, wants: []string{"--ukpd-relay-port must be 0 (off) or a port, got 70000"}},
		{name: "required tags", set: func(o *Options) { o.UkpdRequiredTags = []string{"cluster=a", "nope", "x=a b"} },
			wants: []string{`--ukpd-required-tag: required tag "nope"`, `--ukpd-required-tag: required tag "x=a b"`}},
		{name: "bad sources",
			set: func(o *Options) {
				o.Sources, o.KraftletNodeSelector = []string{"kubelet", "kubelet", "prometheus"}, "a in ("
			},
			wants: []string{`"kubelet" named twice`, `unknown source "prometheus"`, "--kraftlet-node-selector"}},
		{name: "bad endpoint", set: func(o *Options) { o.Sources = []string{"ukpd"}; o.UkpdEndpoints = []string{"ftp://x"} },
			wants: []string{"--ukpd-endpoint"}},
		{name: "resource endpoint", set: func(o *Options) { o.KubeletEndpoint = "resource" }},
		{name: "unknown kubelet endpoint", set: func(o *Options) { o.KubeletEndpoint = "/stats/summary" },
			wants: []string{`--kubelet-endpoint must be one of ["summary" "resource"], got "/stats/summary"`}},
		{name: "timeout equal to resolution", set: func(o *Options) { o.KubeletRequestTimeout = o.MetricResolution }, wants: []string{"below --metric-resolution"}},
		{name: "negative HPA readiness durations",
			set: func(o *Options) {
				o.HPACPUInitializationPeriod, o.HPAInitialReadinessDelay = -time.Second, -time.Second
			},
			wants: []string{"--horizontal-pod-autoscaler-cpu-initialization-period", "--horizontal-pod-autoscaler-initial-readiness-delay"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.set(o)
			checkErrors(t, o.Validate(), tc.wants, strings.Contains)
		})
	}
}

// checkErrors checks that errs are as many as wants, and that each error
// matches its want by match (strings.Contains or strings.HasPrefix).
func checkErrors(t *testing.T, errs []error, wants []string, match func(s, want string) bool) {
	t.Helper()
	if len(errs) != len(wants) {
		t.Fatalf("got %d errors %q, want %d", len(errs), errs, len(wants))
	}
	for i, w := range wants {
		if !match(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want it to match %q", i, errs[i], w)
		}
	}
}

func TestFlagsParse(t *testing.T) {
	o := NewOptions()
	fss := o.Flags()
	for set, a := range map[string][]string{
		"metrics":        {"--metric-resolution=30s", "--node-selector=pool=a"},
		"kubelet client": {"--kubelet-port=10255", "--kubelet-use-node-status-port", "--kubelet-preferred-address-types=InternalIP"},
	} {
		if err := fss.FlagSet(set).Parse(a); err != nil {
			t.Fatalf("%s: %v", set, err)
		}
	}
	if o.MetricResolution != 30*time.Second || o.NodeSelector != "pool=a" || o.KubeletPort != 10255 || !o.KubeletUseNodeStatusPort {
		t.Errorf("flags not applied: %+v", o)
	}
	if diff := cmp.Diff([]string{"InternalIP"}, o.KubeletPreferredAddressTypes); diff != "" {
		t.Error(diff)
	}
}

func TestKubeletREST(t *testing.T) {
	cluster := &rest.Config{Host: "https://10.0.0.1", BearerTokenFile: "/var/run/secrets/token",
		TLSClientConfig: rest.TLSClientConfig{CAFile: "/cluster-ca.crt"}}
	tests := []struct {
		name      string
		set       func(o *Options)
		wantTLS   rest.TLSClientConfig
		wantToken string
	}{
		{name: "cluster CA and token by default", set: func(*Options) {}, wantTLS: rest.TLSClientConfig{CAFile: "/cluster-ca.crt"}, wantToken: "/var/run/secrets/token"},
		{name: "explicit CA", set: func(o *Options) { o.KubeletCAFile = "/kubelet-ca.crt" }, wantTLS: rest.TLSClientConfig{CAFile: "/kubelet-ca.crt"}, wantToken: "/var/run/secrets/token"},
		{name: "insecure", set: func(o *Options) { o.KubeletInsecureTLS = true }, wantTLS: rest.TLSClientConfig{Insecure: true}, wantToken: "/var/run/secrets/token"},
		{name: "client certificate replaces the token",
			set:     func(o *Options) { o.KubeletClientCertFile, o.KubeletClientKeyFile = "/c.crt", "/c.key" },
			wantTLS: rest.TLSClientConfig{CAFile: "/cluster-ca.crt", CertFile: "/c.crt", KeyFile: "/c.key"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.set(o)
			got := o.kubeletREST(cluster)
			checkDiff(t, "TLS", tc.wantTLS, got.TLSClientConfig)
			if got.BearerTokenFile != tc.wantToken {
				t.Errorf("token file = %q, want %q", got.BearerTokenFile, tc.wantToken)
			}
		})
	}
}

// The custom-metrics component relies on a repeated --apiservices adding
// to the list.
func TestRepeatedAPIServicesAccumulate(t *testing.T) {
	o := NewCertControllerOptions()
	fss := o.Flags()
	must(t, fss.FlagSet("certificate").Parse([]string{"--apiservices=a.b,b.c", "--apiservices=c.d"}))
	checkDiff(t, "apiservices", []string{"a.b", "b.c", "c.d"}, o.APIServices)
}

// TestHPAReadinessDefaults: the readiness flags default to
// kube-controller-manager's, so an unset server and an unset controller
// manager agree.
func TestHPAReadinessDefaults(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	for name, want := range map[string]string{
		"horizontal-pod-autoscaler-cpu-initialization-period": "5m0s",
		"horizontal-pod-autoscaler-initial-readiness-delay":   "30s",
	} {
		if f := fs.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s: %+v, want one defaulting to %s", name, f, want)
		}
	}
}
