package ukpd

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

const testToken = "tok-3f9a1c-very-secret"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// env is a fake ukpd served over TLS, with a token file and a CA file.
type env struct {
	clk       *clocktesting.FakeClock
	fake      *fakeukpd.Server
	srv       *httptest.Server
	tokenFile string
	caFile    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	fake := fakeukpd.New(fakeukpd.Config{Clock: clk, Tokens: []string{testToken}})
	srv := httptest.NewTLSServer(fake)
	t.Cleanup(func() {
		fake.Close()
		srv.Close()
	})
	dir := t.TempDir()
	e := &env{clk: clk, fake: fake, srv: srv, tokenFile: filepath.Join(dir, "token"), caFile: filepath.Join(dir, "ca.crt")}
	writeFile(t, e.tokenFile, testToken+"\n")
	writeFile(t, e.caFile, string(certPEM(srv)))
	return e
}

// certPEM is the serving certificate of a TLS test server, as a CA file
// holds it.
func certPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// client returns a client of the env's server; mod adjusts its config.
func (e *env) client(t *testing.T, mod func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{URL: e.srv.URL, TokenFile: e.tokenFile, CAFile: e.caFile}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

func (e *env) add(t *testing.T, spec fakeukpd.InstanceSpec) fakeukpd.Instance {
	t.Helper()
	in, err := e.fake.AddInstance(spec)
	if err != nil {
		t.Fatalf("AddInstance: %v", err)
	}
	return in
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
