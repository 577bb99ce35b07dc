package apiserver

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestReadLimit(t *testing.T) {
	entered := make(chan string, 4)
	release := make(chan struct{})
	h := ReadLimit{Concurrent: 1, Wait: 100 * time.Millisecond}.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		if r.URL.Query().Has("block") {
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	serve := func(path string) <-chan int {
		done := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			done <- rec.Code
		}()
		return done
	}
	wait := func(what string, ch <-chan int) int {
		t.Helper()
		select {
		case code := <-ch:
			return code
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not finish", what)
			return 0
		}
	}

	// One list holds the only slot.
	first := serve("/apis/metrics.k8s.io/v1beta1/pods?block")
	if p := <-entered; p != "/apis/metrics.k8s.io/v1beta1/pods" {
		t.Fatalf("entered %s", p)
	}
	// Health checks and /metrics are not limited.
	for _, p := range []string{"/readyz", "/metrics", "/apis"} {
		if code := wait(p, serve(p)); code != http.StatusOK {
			t.Errorf("%s = %d while the slot is taken, want 200", p, code)
		}
		<-entered
	}
	// A second read waits its bound, then is told to retry.
	if code := wait("second read", serve("/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/*/m")); code != http.StatusTooManyRequests {
		t.Errorf("second read = %d, want 429", code)
	}
	// A read that finds the slot freed within its wait is served.
	third := serve("/apis/metrics.k8s.io/v1/nodes")
	close(release)
	if code := wait("first read", first); code != http.StatusOK {
		t.Errorf("first read = %d", code)
	}
	if code := wait("third read", third); code != http.StatusOK {
		t.Errorf("third read = %d, want 200 once the slot was free", code)
	}
}
