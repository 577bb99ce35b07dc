package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	certutil "k8s.io/client-go/util/cert"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// msFlag is one flag of metrics-server's --help.
type msFlag struct {
	name, kind string // kind is "" for a bool
}

// metricsServerFlags returns every flag metrics-server v0.8.0 prints in its
// --help, as hack/metrics-server-v0.8.0-flags.txt lists them ("name" or
// "name kind" a line). The e2e suite's TestMetricsServerFlagList checks the
// list against the binary that make tools builds.
func metricsServerFlags(t *testing.T) []msFlag {
	t.Helper()
	data, err := os.ReadFile("../../../hack/metrics-server-v0.8.0-flags.txt")
	must(t, err)
	var flags []msFlag
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		name, kind, _ := strings.Cut(l, " ")
		flags = append(flags, msFlag{name: name, kind: kind})
	}
	// A sanity floor: v0.8.0 prints 101 flags.
	if len(flags) < 100 {
		t.Fatalf("read %d flags from hack/metrics-server-v0.8.0-flags.txt, want at least 100", len(flags))
	}
	return flags
}

// TestMetricsServerFlagsAccepted gives every flag of metrics-server v0.8.0's
// --help (the checked-in list) a valid value, all at once, and builds the server's configuration
// from them: no flag may be unknown, none may fail validation, and the
// generic apiserver's options must reach the configuration as they do in
// metrics-server.
func TestMetricsServerFlagsAccepted(t *testing.T) {
	t.Cleanup(func() { _ = logsapi.ResetForTest(nil) })
	dir := t.TempDir()
	values := flagValues(dir, writeFixtures(t, dir))

	var args []string
	for _, f := range metricsServerFlags(t) {
		if f.name == "version" {
			continue // it would stop before validation; TestVersion covers it.
		}
		v, ok := values[f.name]
		if !ok {
			v, ok = kindValues[f.kind]
		}
		if !ok {
			t.Errorf("no valid value known for --%s (%s): add one to flagValues", f.name, f.kind)
			continue
		}
		args = append(args, "--"+f.name+"="+v)
	}
	if t.Failed() {
		return
	}
	o, done, err := prepare(args)
	if err != nil || done {
		t.Fatalf("metrics-server's flags: done=%v, err=%v\nargs: %s", done, err, strings.Join(args, " "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := o.ServerConfig(ctx)
	if err != nil {
		t.Fatalf("server configuration from metrics-server's flags: %v", err)
	}
	g := cfg.API.Config
	got, want := map[string]string{}, map[string]string{}
	for _, c := range []struct{ name, got, want string }{
		{"shutdown-delay-duration", g.ShutdownDelayDuration.String(), "3s"},
		{"max-requests-inflight", strconv.Itoa(g.MaxRequestsInFlight), "401"},
		{"max-mutating-requests-inflight", strconv.Itoa(g.MaxMutatingRequestsInFlight), "201"},
		{"request-timeout", g.RequestTimeout.String(), "1m1s"},
		{"min-request-timeout", strconv.Itoa(g.MinRequestTimeout), "1801"},
		{"goaway-chance", strconv.FormatFloat(g.GoawayChance, 'f', -1, 64), "0.001"},
		{"shutdown-send-retry-after", strconv.FormatBool(g.ShutdownSendRetryAfter), "true"},
		{"audit backend", strconv.FormatBool(g.AuditBackend != nil), "true"},
		{"priority and fairness", strconv.FormatBool(g.FlowControl != nil), "false"},
		{"enable-priority-and-fairness", strconv.FormatBool(o.Features.EnablePriorityAndFairness), "false"},
		{"external-hostname", g.ExternalAddress, "metrics.example.com"},
		{"deprecated-kubelet-completely-in", strconv.FormatBool(o.DeprecatedKubeletCompletelyInsecure), "false"},
	} {
		got[c.name], want[c.name] = c.got, c.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration from metrics-server's flags (-want +got):\n%s", diff)
	}
	t.Logf("%d metrics-server v0.8.0 flags accepted", len(args))
}

// TestVersion: --version stops before validation, as in metrics-server
// (whose flag it is), even beside flags that would not validate.
func TestVersion(t *testing.T) {
	o, done, err := prepare([]string{"--version", "--metric-resolution=1s"})
	if err != nil || !done || o != nil {
		t.Fatalf("prepare(--version) = %v, %v, %v; want nil, true, nil", o, done, err)
	}
}

// TestUnknownFlagFails is the control: the same path refuses a flag
// neither server has.
func TestUnknownFlagFails(t *testing.T) {
	_, _, err := prepare([]string{"--no-such-flag=1"})
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --no-such-flag") {
		t.Fatalf("prepare(--no-such-flag) = %v, want an unknown-flag error", err)
	}
}

// kindValues are valid values by the type --help prints.
var kindValues = map[string]string{"": "true", "duration": "11s", "int": "2", "float32": "5", "ip": "127.0.0.1"}

type fixtures struct{ cert, key, kubeconfig, policy string }

// writeFixtures writes a self-signed pair (serving certificate, every CA
// and the kubelet client pair), a kubeconfig for a server that is never
// dialled, and an audit policy.
func writeFixtures(t *testing.T, dir string) fixtures {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	must(t, err)
	f := fixtures{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "audit-policy.yaml")}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", certificate-authority: %q}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, f.cert)
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n"
	for p, data := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.kubeconfig: []byte(kubeconfig), f.policy: []byte(policy)} {
		must(t, os.WriteFile(p, data, 0o600))
	}
	return f
}

// flagValues are valid values by flag name, where the type's value would
// not do; values that differ from the defaults show that a flag is applied.
func flagValues(dir string, f fixtures) map[string]string {
	return map[string]string{
		// metrics server
		"kubeconfig": f.kubeconfig, "metric-resolution": "15s",
		// generic
		"cors-allowed-origins": `//127\.0\.0\.1(:|$)`, "emulated-version": "kube=1.36",
		"external-hostname": "metrics.example.com", "feature-gates": "LoggingAlphaOptions=true",
		"goaway-chance": "0.001", "livez-grace-period": "10s", "max-mutating-requests-inflight": "201",
		"max-requests-inflight": "401", "min-request-timeout": "1801", "request-timeout": "61s",
		"shutdown-delay-duration": "3s", "shutdown-watch-termination-grace-period": "1s",
		"storage-initialization-timeout": "1m", "strict-transport-security-directives": "max-age=31536000",
		// kubelet client: the CA excludes --kubelet-insecure-tls, as in metrics-server.
		"kubelet-certificate-authority": f.cert, "kubelet-client-certificate": f.cert, "kubelet-client-key": f.key,
		"kubelet-insecure-tls": "false", "kubelet-port": "10250", "kubelet-preferred-address-types": "InternalIP,Hostname",
		"kubelet-request-timeout": "5s", "node-selector": "kubernetes.io/os=linux",
		// secure serving
		"bind-address": "127.0.0.1", "cert-dir": filepath.Join(dir, "certs"), "http2-max-streams-per-connection": "100",
		"secure-port": strconv.Itoa(freePort()), "tls-cert-file": f.cert, "tls-private-key-file": f.key,
		"tls-cipher-suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "tls-min-version": "VersionTLS12",
		"tls-sni-cert-key": f.cert + "," + f.key,
		// authentication and authorization; skip-lookup keeps them off the network.
		"authentication-kubeconfig": f.kubeconfig, "client-ca-file": f.cert, "requestheader-allowed-names": "front-proxy-client",
		"requestheader-client-ca-file": f.cert, "requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers": "X-Remote-Group", "requestheader-uid-headers": "X-Remote-Uid",
		"requestheader-username-headers": "X-Remote-User", "authorization-always-allow-paths": "/healthz,/readyz,/livez",
		"authorization-kubeconfig": f.kubeconfig,
		// audit
		"audit-log-format": "json", "audit-log-mode": "batch", "audit-log-path": filepath.Join(dir, "audit.log"),
		"audit-log-version": "audit.k8s.io/v1", "audit-policy-file": f.policy, "audit-webhook-config-file": f.kubeconfig,
		"audit-webhook-mode": "batch", "audit-webhook-version": "audit.k8s.io/v1",
		"audit-log-truncate-max-batch-size": "10485760", "audit-log-truncate-max-event-size": "102400",
		"audit-webhook-truncate-max-batch-size": "10485760", "audit-webhook-truncate-max-event-size": "102400",
		// features
		"debug-socket-path": filepath.Join(dir, "debug.sock"),
		// logging: json, with the alpha options the feature gate above
		// allows; --vmodule works with the text format only, so it is
		// given its empty value.
		"logging-format": "json", "log-flush-frequency": "5s", "log-json-info-buffer-size": "1Ki",
		"log-text-info-buffer-size": "1Ki", "v": "2", "vmodule": "",
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// TestBadPodMetricsConfigRefusesToStart: the command returns, before
// reading a kubeconfig or listening, with every error of the file.
func TestBadPodMetricsConfigRefusesToStart(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "pod-metrics.yaml")
	must(t, os.WriteFile(bad, []byte("presets: [tgi]\nmaxBytes: -1\npods: {selector: \"a in (\"}\n"), 0o600))
	refusesToStart(t, []string{"--enable-custom-metrics", "--pod-metrics-config=" + bad, "--kubeconfig=/nonexistent", "--secure-port=0"},
		`unknown preset "tgi"`, "maxBytes: -1 must be above 0", "pods.selector:", "pods.port: required with pods.selector")
}

// refusesToStart runs the command with args, which name the kubeconfig
// /nonexistent, and wants an error naming each of wants, from before the
// kubeconfig is read.
func refusesToStart(t *testing.T, args []string, wants ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, args)
	if err == nil {
		t.Fatalf("Run %v returned nil", args)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "/nonexistent") {
		t.Errorf("error %q: the command went past validation", err)
	}
}
