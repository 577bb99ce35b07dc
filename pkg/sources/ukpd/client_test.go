package ukpd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

func TestClientReadsBothForms(t *testing.T) {
	e := newEnv(t, nil)
	web := e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "web-0", Container: "app", Node: "kraftlet-a", CPUCores: 0.5, RSSBytes: 64 << 20})
	idle := e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "idle-0", Container: "app", Node: "kraftlet-a", CPUCores: 2})
	gone := e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "gone-0", Container: "app"})
	e.clk.Step(10 * time.Second)
	must(t, e.fake.Standby(idle.UUID))
	must(t, e.fake.Stop(gone.UUID))
	e.clk.Step(10 * time.Second)
	for _, format := range []Format{FormatJSON, FormatText} {
		t.Run(string(format), func(t *testing.T) {
			want := []Sample{
				{UUID: web.UUID, Name: web.Name, State: "running", CPUCoreNanos: 10e9, RSSBytes: 64 << 20, StartCount: 1, StartedAt: t0,
					Uptime: 20 * time.Second, HasUptime: true},
				// In standby the uptime stands still.
				{UUID: idle.UUID, Name: idle.Name, State: "standby", CPUCoreNanos: 20e9, StartCount: 1, StartedAt: t0,
					Uptime: 10 * time.Second, HasUptime: true},
			}
			if format == FormatText {
				want[0].Name, want[1].Name = "", "" // the Prometheus form carries no names
			}
			got, err := e.client(t, func(cfg *ClientConfig) { cfg.MetricsFormat = format }).Metrics(t.Context())
			must(t, err)
			checkDiff(t, "Metrics", want, got)
		})
	}
	list, err := e.client(t, nil).Instances(t.Context())
	must(t, err)
	checkDiff(t, "Instances", []Instance{
		{UUID: web.UUID, Name: web.Name, State: "running", Tags: web.Tags, VCPUs: 1},
		{UUID: idle.UUID, Name: idle.Name, State: "standby", Tags: idle.Tags, VCPUs: 2},
		{UUID: gone.UUID, Name: gone.Name, State: "stopped", Tags: gone.Tags, VCPUs: 1},
	}, list)
}

// TestClientFollowsTheAnswer checks that the body is decoded by what the
// server sent, whatever was asked for.
func TestClientFollowsTheAnswer(t *testing.T) {
	const text = "instance_cpu_time_s{instance_uuid=\"u1\"} 1.5\ninstance_rss_bytes{instance_uuid=\"u1\"} 10\n"
	const json = `{"status":"success","data":{"instances":[{"uuid":"u1","cpu_time_ms":1500,"rss_bytes":10}]}}`
	tests := []struct {
		name, contentType, body string
		ask                     Format
	}{
		{name: "text when JSON was asked", ask: FormatJSON, contentType: "text/plain; version=0.0.4", body: text},
		{name: "JSON when text was asked", ask: FormatText, contentType: "application/json", body: json},
		{name: "untyped JSON", ask: FormatText, body: json},
		{name: "untyped text", ask: FormatJSON, body: text},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				wantAccept := map[Format]string{FormatJSON: "application/json", FormatText: "text/plain"}[tc.ask]
				if got := r.Header.Get("Accept"); got != wantAccept {
					t.Errorf("Accept = %q, want %q", got, wantAccept)
				}
				w.Header()["Content-Type"] = []string{tc.contentType}
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c, err := NewClient(ClientConfig{URL: srv.URL, MetricsFormat: tc.ask})
			must(t, err)
			got, err := c.Metrics(t.Context())
			must(t, err)
			checkDiff(t, "Metrics", []Sample{{UUID: "u1", CPUCoreNanos: 1500e6, RSSBytes: 10}}, got)
		})
	}
}

func TestClientFailures(t *testing.T) {
	e := newEnv(t, nil)
	e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: "p", Container: "c"})
	ca, err := pki.NewCA("other-ca", time.Now(), time.Hour)
	must(t, err)
	otherCA := writeTemp(t, string(ca.CertPEM()))
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	shortTimeout := func(c *ClientConfig) { c.RequestTimeout = 20 * time.Millisecond }
	token := func(s string) func(*ClientConfig) { return func(c *ClientConfig) { c.TokenFile = s } }
	tests := []struct {
		name                string
		fault               *fakeukpd.Fault
		cfg                 func(*ClientConfig)
		deadline            time.Duration // of the context, if not 0
		wantReason, wantErr string
	}{
		{name: "500", fault: &fakeukpd.Fault{Kind: fakecore.FaultStatus500}, wantReason: sources.ReasonHTTPStatus,
			wantErr: "500 Internal Server Error: Internal error"},
		{name: "garbage", fault: &fakeukpd.Fault{Kind: fakecore.FaultGarbage}, wantReason: sources.ReasonDecode, wantErr: "decode instance metrics"},
		{name: "huge body", fault: &fakeukpd.Fault{Kind: fakecore.FaultHugeBody, Bytes: 1 << 20},
			cfg: func(c *ClientConfig) { c.MaxResponseBytes = 64 << 10 }, wantReason: sources.ReasonTooLarge, wantErr: "larger than 65536 bytes"},
		{name: "slow past the deadline", fault: ptr.To(fakecore.Slow(time.Hour)), deadline: 20 * time.Millisecond,
			wantReason: sources.ReasonTimeout, wantErr: "deadline exceeded"},
		{name: "slow past the request timeout", fault: ptr.To(fakecore.Slow(time.Hour)), cfg: shortTimeout,
			wantReason: sources.ReasonTimeout, wantErr: "deadline exceeded"},
		{name: "stall", fault: &fakeukpd.Fault{Kind: fakecore.FaultStall}, cfg: shortTimeout, wantReason: sources.ReasonTimeout, wantErr: "deadline exceeded"},
		{name: "truncated", fault: &fakeukpd.Fault{Kind: fakecore.FaultTruncated}, wantReason: sources.ReasonDecode, wantErr: "decode instance metrics"},
		{name: "wrong token", cfg: token(writeTemp(t, "not-the-token")), wantReason: sources.ReasonHTTPStatus,
			wantErr: "401 Unauthorized (check the bearer token)"},
		{name: "no token", cfg: token(""), wantReason: sources.ReasonHTTPStatus, wantErr: "401"},
		{name: "missing token file", cfg: token("/nonexistent/token"), wantReason: sources.ReasonOther, wantErr: "bearer token"},
		{name: "empty token file", cfg: token(writeTemp(t, " \n")), wantReason: sources.ReasonOther, wantErr: "empty"},
		{name: "two-line token file", cfg: token(writeTemp(t, testToken+"\n"+testToken)), wantReason: sources.ReasonOther, wantErr: "whitespace"},
		{name: "unknown CA", cfg: func(c *ClientConfig) { c.CAFile = otherCA }, wantReason: sources.ReasonTLS, wantErr: "certificate"},
		{name: "system roots", cfg: func(c *ClientConfig) { c.CAFile = "" }, wantReason: sources.ReasonTLS, wantErr: "certificate"},
		{name: "connection refused", cfg: func(c *ClientConfig) { c.URL = closed.URL }, wantReason: sources.ReasonConnection, wantErr: "connect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault != nil {
				must(t, e.fake.SetFault(*tc.fault))
				defer e.fake.ClearFault("")
			}
			ctx, cancel := context.WithCancel(t.Context())
			if tc.deadline != 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
			}
			defer cancel()
			checkFailure(ctx, t, e.client(t, tc.cfg), tc.wantReason, tc.wantErr)
		})
	}
}

// TestClientTransportFaults breaks TLS below the fake ukpd's handler, as
// the fake serving the e2e suite breaks it, and checks the reason.
func TestClientTransportFaults(t *testing.T) {
	fake, err := fakeukpd.Start(fakeukpd.Options{Config: fakeukpd.Config{Tokens: []string{testToken}}, CertDir: t.TempDir()})
	must(t, err)
	t.Cleanup(func() { must(t, fake.Close()) })
	tokenFile := writeTemp(t, testToken)
	// A stall never answers: the request timeout ends it, and is tiny.
	// Else it is a guard against a hang, which a loaded machine never
	// reaches.
	client := func(t *testing.T, timeout time.Duration) *Client {
		c, err := NewClient(ClientConfig{URL: fake.URL, TokenFile: tokenFile, CAFile: fake.CAFile, RequestTimeout: timeout})
		must(t, err)
		return c
	}
	tests := []struct {
		name                string
		fault               fakeukpd.FaultKind
		timeout             time.Duration
		wantReason, wantErr string
	}{
		{name: "untrusted certificate", fault: fakecore.FaultUntrustedCertificate, timeout: 30 * time.Second, wantReason: sources.ReasonTLS,
			wantErr: "unknown authority"},
		{name: "handshake stall", fault: fakecore.FaultHandshakeStall, timeout: 50 * time.Millisecond, wantReason: sources.ReasonTimeout,
			wantErr: "deadline exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			must(t, fake.SetTransportFault(tc.fault))
			t.Cleanup(func() { must(t, fake.SetTransportFault("")) })
			checkFailure(t.Context(), t, client(t, tc.timeout), tc.wantReason, tc.wantErr)
		})
	}
	if _, err := client(t, 30*time.Second).Metrics(t.Context()); err != nil {
		t.Errorf("after the faults: %v", err)
	}
}

// checkFailure checks that c's Metrics fails for wantReason with an error
// that says wantErr, names the endpoint and never the token.
func checkFailure(ctx context.Context, t *testing.T, c *Client, wantReason, wantErr string) {
	t.Helper()
	samples, err := c.Metrics(ctx)
	if samples != nil || err == nil {
		t.Fatalf("Metrics = %v, %v; want an error", samples, err)
	}
	if got := sources.Reason(err); got != wantReason {
		t.Errorf("reason = %q, want %q (error: %v)", got, wantReason, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, wantErr) || !strings.HasPrefix(msg, "ukpd "+c.String()+": ") || strings.Contains(msg, testToken) {
		t.Errorf("error %q: want one that contains %q, names the endpoint %s and not the token", msg, wantErr, c.String())
	}
}

func TestClientInsecureOnlyByOption(t *testing.T) {
	c := newEnv(t, nil).client(t, func(c *ClientConfig) { c.CAFile, c.InsecureSkipTLSVerify = "", true })
	if _, err := c.Instances(t.Context()); err != nil {
		t.Errorf("Instances with InsecureSkipTLSVerify: %v", err)
	}
}

func TestClientRereadsToken(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	// Each step rotates the token, or not, before a request.
	for _, step := range []struct {
		name   string
		rotate func(token string)
		token  string
	}{
		{"first request", nil, testToken},
		{"after an in-place rotation", func(tok string) { writeFile(t, e.tokenFile, tok+"\n") }, "second-token-longer"},
		// As a Secret volume does.
		{"after a rotation by rename", func(tok string) { must(t, os.Rename(writeTemp(t, tok), e.tokenFile)) }, "third-token"},
	} {
		e.fake.SetTokens(step.token)
		if step.rotate != nil {
			step.rotate(step.token)
		}
		if _, err := c.Instances(t.Context()); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
	// The server moves on before the file does: refused, and the old token
	// is not in the error.
	e.fake.SetTokens("fourth-token")
	if _, err := c.Instances(t.Context()); err == nil || strings.Contains(err.Error(), "third-token") {
		t.Fatalf("error = %v, want a 401 that does not quote the token", err)
	}
}

func TestNewClientRejects(t *testing.T) {
	garbageCA := writeTemp(t, "not a certificate")
	tests := []struct {
		name    string
		cfg     ClientConfig
		wantErr string
	}{
		{name: "no URL", cfg: ClientConfig{}, wantErr: "empty URL"},
		{name: "bad scheme", cfg: ClientConfig{URL: "ftp://h"}, wantErr: "http or https"},
		{name: "bad format", cfg: ClientConfig{URL: "https://h", MetricsFormat: "xml"}, wantErr: `unknown metrics format "xml"`},
		{name: "missing CA", cfg: ClientConfig{URL: "https://h", CAFile: "/nonexistent/ca.crt"}, wantErr: "read CA file"},
		{name: "CA without certificates", cfg: ClientConfig{URL: "https://h", CAFile: garbageCA}, wantErr: "holds no PEM certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewClient(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewClient error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestInstancesFailedPage checks that a page that fails fails the whole
// list, so the cached one is kept rather than replaced by a part.
func TestInstancesFailedPage(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 3 {
		e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: fmt.Sprintf("p-%d", i), Container: "c"})
	}
	must(t, e.fake.SetFault(fakeukpd.Fault{Kind: fakecore.FaultStatus500, Path: "/v1/instances"}))
	if list, err := e.client(t, nil).Instances(t.Context()); list != nil || err == nil {
		t.Errorf("Instances = %v, %v; want no list and an error", list, err)
	}
}

// TestClientHostileText checks that an answer of lines with 100,000 labels
// each fails as a decode error, without a sample, and without parsing any
// line past its 64th label.
func TestClientHostileText(t *testing.T) {
	e := newEnv(t, nil)
	e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: "p", Container: "c"})
	must(t, e.fake.SetFault(fakeukpd.Fault{Kind: fakeukpd.FaultHostileText, Bytes: 8 << 20}))
	samples, err := e.client(t, nil).Metrics(t.Context())
	checkRejected(t, samples, err, "more than 64 labels", sources.ReasonDecode)
}

// TestClientOlderForm checks a ukpd that answers the older JSON form: the
// JSON read (metrics-format=json) fails with the form to use, and the
// Prometheus form, asked for by default, reads the same instance.
func TestClientOlderForm(t *testing.T) {
	e := newEnv(t, nil)
	e.add(t, fakeukpd.InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 0.5})
	e.clk.Step(10 * time.Second)
	must(t, e.fake.SetFault(fakeukpd.Fault{Kind: fakeukpd.FaultOlderForm}))
	samples, err := e.client(t, func(c *ClientConfig) { c.MetricsFormat = FormatJSON }).Metrics(t.Context())
	checkRejected(t, samples, err, "metrics-format=text", sources.ReasonDecode)
	if samples, err = e.client(t, nil).Metrics(t.Context()); err != nil || len(samples) != 1 || samples[0].CPUCoreNanos != 5e9 {
		t.Errorf("text form = %+v, %v; want one instance with 5 core-seconds", samples, err)
	}
}

// ukpd never redirects; one that does must not get the token sent to the
// Location. net/http keeps Authorization on a redirect to the same host,
// so the target here is another port of 127.0.0.1, over plain http.
func TestRedirectNotFollowed(t *testing.T) {
	var reached atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }))
	defer other.Close()
	ukpd := httptest.NewServer(http.RedirectHandler(other.URL+"/v1/instances", http.StatusTemporaryRedirect))
	defer ukpd.Close()
	c, err := NewClient(ClientConfig{URL: ukpd.URL, TokenFile: writeTemp(t, "ukpd-secret")})
	must(t, err)
	if _, err := c.Instances(t.Context()); err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("Instances error = %v, want the redirect's own status", err)
	}
	if reached.Load() {
		t.Error("the redirect was followed, with the token")
	}
}
