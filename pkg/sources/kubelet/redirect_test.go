package kubelet

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
)

// A kubelet never redirects /stats/summary; one that does must not get the
// token sent to the Location, here a plain-http listener on loopback.
func TestSummaryRedirectNotFollowed(t *testing.T) {
	var leaked, reached atomic.Bool
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(true)
		leaked.Store(r.Header.Get("Authorization") != "")
	}))
	defer plain.Close()
	kubelet := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/stats/summary", http.StatusFound))
	defer kubelet.Close()

	c, err := NewClient(ClientConfig{REST: &rest.Config{
		BearerToken:     testToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
	}})
	must(t, err)
	_, err = c.Summary(t.Context(), "n1", strings.TrimPrefix(kubelet.URL, "https://"))
	if err == nil || !strings.Contains(err.Error(), "302 Found") {
		t.Errorf("Summary error = %v, want the redirect's own status", err)
	}
	if reached.Load() || leaked.Load() {
		t.Errorf("the redirect was followed (token sent: %v)", leaked.Load())
	}
}
