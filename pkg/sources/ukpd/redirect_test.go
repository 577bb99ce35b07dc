package ukpd

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// ukpd never redirects; one that does must not get the token sent to the
// Location. net/http keeps Authorization on a redirect to the same host,
// so the target here is another port of 127.0.0.1, over plain http.
func TestRedirectNotFollowed(t *testing.T) {
	var reached atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }))
	defer other.Close()
	ukpd := httptest.NewServer(http.RedirectHandler(other.URL+"/v1/instances", http.StatusTemporaryRedirect))
	defer ukpd.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("ukpd-secret"), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := NewClient(ClientConfig{URL: ukpd.URL, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Instances(t.Context()); err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("Instances error = %v, want the redirect's own status", err)
	}
	if reached.Load() {
		t.Error("the redirect was followed, with the token")
	}
}
