package fakecore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestControl(t *testing.T) {
	type body struct {
		Name string `json:"name"`
	}
	mux := NewControlMux(nil)
	mux.HandleFunc("POST /v1/echo", Route(http.StatusCreated, func(_ *http.Request, b body) (any, error) { return b, nil }))
	mux.HandleFunc("GET /v1/missing", Route(http.StatusOK, func(*http.Request, None) (any, error) { return nil, ErrNotFound }))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := Control{Address: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()

	var got body
	if err := c.Do(ctx, http.MethodPost, "/v1/echo", body{Name: "x"}, &got, http.StatusCreated); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(body{Name: "x"}, got); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if err := c.Do(ctx, http.MethodPost, "/v1/echo", body{Name: "x"}, nil); err == nil || !strings.Contains(err.Error(), "201") {
		t.Errorf("201 where 200 is wanted: error %v", err)
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/missing", nil, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("404: error %v, want the answer's message", err)
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/missing", nil, nil, http.StatusOK, http.StatusNotFound); err != nil {
		t.Errorf("404 accepted: %v", err)
	}
	if err := c.Do(ctx, http.MethodGet, "/healthz", nil, nil); err != nil {
		t.Errorf("healthz: %v", err)
	}
}
