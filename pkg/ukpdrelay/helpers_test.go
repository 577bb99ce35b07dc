package ukpdrelay

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
)

const (
	// upstreamToken is ukpd's token, which only ukpd may see.
	upstreamToken = "ukpd-token-0123456789"
	// readerToken is the server's token, allowed to get the node's stats.
	readerToken = "reader-token-abcdef"
	// strangerToken authenticates an identity with no grant.
	strangerToken = "stranger-token-xyz"
	nodeName      = "kraftlet-host-a"
	readerName    = "system:serviceaccount:kube-system:group-metrics-server"
	strangerName  = "system:serviceaccount:default:stranger"
)

// seen is what a fake ukpd received.
type seen struct {
	Path, Query, Authorization, Accept string
}

// recorder is an upstream on loopback that records every request and
// answers with answer.
type recorder struct {
	srv *httptest.Server

	mu      sync.Mutex
	got     []seen
	headers []http.Header
}

func newRecorder(t *testing.T, answer http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, seen{Path: req.URL.Path, Query: req.URL.RawQuery, Authorization: req.Header.Get("Authorization"), Accept: req.Header.Get("Accept")})
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		answer(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) requests() ([]seen, []http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.got...), append([]http.Header(nil), r.headers...)
}

// fakeAuthn knows two bearer tokens. Unlike k8s.io/apiserver's bearer
// token authenticator, it leaves the Authorization header on the request,
// so a relay that copied it would be caught.
func fakeAuthn() authenticator.Request {
	users := map[string]string{readerToken: readerName, strangerToken: strangerName}
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		name, known := users[tok]
		if !ok || !known {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
	})
}

// fakeAuthz allows the reader to get the stats and metrics of nodeName,
// and records what it was asked.
type fakeAuthz struct {
	mu    sync.Mutex
	asked []authorizer.AttributesRecord
}

func (a *fakeAuthz) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.mu.Lock()
	a.asked = append(a.asked, attrs.(authorizer.AttributesRecord))
	a.mu.Unlock()
	if attrs.GetUser().GetName() == readerName && attrs.GetVerb() == "get" && attrs.GetResource() == "nodes" &&
		(attrs.GetSubresource() == "stats" || attrs.GetSubresource() == "metrics") && attrs.GetName() == nodeName {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no grant", nil
}

func (a *fakeAuthz) attributes() []authorizer.AttributesRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]authorizer.AttributesRecord(nil), a.asked...)
}

// env is a relay on loopback in front of a fake ukpd, with a second
// listener that no request may reach.
type env struct {
	relay           *httptest.Server
	ukpd, elsewhere *recorder
	authz           *fakeAuthz
	tokenFile       string
}

// newEnv starts an env whose ukpd answers with answer; cfg may change the
// relay's configuration before it is built.
func newEnv(t *testing.T, answer func(e *env, w http.ResponseWriter, r *http.Request), cfg func(*Config)) *env {
	t.Helper()
	e := &env{authz: &fakeAuthz{}, tokenFile: filepath.Join(t.TempDir(), "token")}
	writeFile(t, e.tokenFile, upstreamToken+"\n")
	e.elsewhere = newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") })
	e.ukpd = newRecorder(t, func(w http.ResponseWriter, r *http.Request) { answer(e, w, r) })
	c := Config{Upstream: e.ukpd.srv.URL, TokenFile: e.tokenFile, NodeName: nodeName, Authenticator: fakeAuthn(), Authorizer: e.authz}
	if cfg != nil {
		cfg(&c)
	}
	relay, err := New(c)
	must(t, err)
	e.relay = httptest.NewServer(relay)
	t.Cleanup(e.relay.Close)
	return e
}

// answer is what the relay answered.
type answer struct {
	Code   int
	Header http.Header
	Body   string
}

// do sends method path (with its query) to the relay, with the bearer
// token when not empty and the Accept header when not empty.
func (e *env) do(t *testing.T, method, path, token, accept string) answer {
	t.Helper()
	a, err := e.send(t.Context(), method, path, token, accept)
	must(t, err)
	return a
}

// send is do for another goroutine than the test's.
func (e *env) send(ctx context.Context, method, path, token, accept string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.relay.URL+path, nil)
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.relay.Client().Do(req)
	if err != nil {
		return answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return answer{Code: resp.StatusCode, Header: resp.Header, Body: string(body)}, err
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	must(t, ln.Close())
	return "http://" + ln.Addr().String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(content), 0o600))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func checkDiff(t *testing.T, what string, want, got any, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// lockedBuffer is a bytes.Buffer that klog may write while a test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captureLogs sends klog's output, at verbosity 2, to the buffer it
// returns until the test ends.
func captureLogs(t *testing.T) *lockedBuffer {
	t.Helper()
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	buf := &lockedBuffer{}
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "v": "2"} {
		must(t, fs.Set(k, v))
	}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}
