package fakecore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

type testOptions struct{ port, name string }

func (o *testOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.port, "port", "", "")
	fs.StringVar(&o.name, "name", "", "")
}

func (o *testOptions) Validate() (errs []error) {
	for flag, v := range map[string]string{"port": o.port, "name": o.name} {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s is required", flag))
		}
	}
	return errs
}

func TestExecute(t *testing.T) {
	tests := []struct {
		name          string
		args, wantErr []string
		wantRun       bool
	}{
		{name: "valid", args: []string{"--port=1", "--name=x"}, wantRun: true},
		{name: "every validation error", args: nil, wantErr: []string{"--port is required", "--name is required"}},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: []string{"unknown flag: --nope"}},
		{name: "help", args: []string{"--help"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			c := NewCommand("test", &testOptions{}, func(context.Context) error { ran = true; return nil })
			c.SetOut(&strings.Builder{})
			c.SetErr(&strings.Builder{})
			c.SetArgs(tc.args)
			err := c.ExecuteContext(context.Background())
			if ran != tc.wantRun {
				t.Errorf("ran %v, want %v", ran, tc.wantRun)
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want one containing %q", err, w)
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("error %v, want none", err)
			}
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:0": true, "127.3.2.1:80": true, "[::1]:9000": true, "localhost:1": true,
		"0.0.0.0:9000": false, "10.0.0.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		if err := CheckLoopback("control-address", addr); (err == nil) != ok {
			t.Errorf("%s: error %v, want ok %v", addr, err, ok)
		}
	}
}

func TestWriteAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for _, data := range []string{"first", "second"} {
		if err := writeAtomic(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Errorf("read %q, %v; want %q", got, err, data)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	if err := writeAtomic(filepath.Join(t.TempDir(), "no", "dir"), nil, 0o600); err == nil {
		t.Error("wrote into a missing directory")
	}
}

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
