package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("t1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "defaults with a token file", args: []string{"--token-file", good}},
		{name: "no token file", want: []string{"--token-file is required"}},
		{name: "missing token file", args: []string{"--token-file", filepath.Join(dir, "nope")}, want: []string{"--token-file: open"}},
		{name: "empty token file", args: []string{"--token-file", empty}, want: []string{"holds no token"}},
		{
			name: "bad addresses",
			args: []string{"--token-file", good, "--listen", "nowhere", "--control-address", "0.0.0.0:9000"},
			want: []string{"--listen:", "not a loopback address"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("fake-ukpd", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			errs := o.Validate()
			var got []string
			for i, err := range errs {
				if i < len(tc.want) && !strings.Contains(err.Error(), tc.want[i]) {
					t.Errorf("error %d = %v, want one containing %q", i, err, tc.want[i])
				}
				got = append(got, err.Error())
			}
			if len(errs) != len(tc.want) {
				t.Errorf("errors = %q, want %d", got, len(tc.want))
			}
		})
	}
}

func TestRunServesTLS(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := (&Options{Options: fakeukpd.Options{
		Config: fakeukpd.Config{TokenFile: tokenFile}, Listen: "127.0.0.1:0", ControlAddress: "127.0.0.1:0", CertDir: filepath.Join(dir, "tls"),
	}}).Config()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan fakeukpd.State, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, ready) }()
	var state fakeukpd.State
	select {
	case state = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}

	var written fakeukpd.State
	b, err := os.ReadFile(filepath.Join(dir, "tls", "ukpd.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &written); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(state, written); diff != "" || !strings.HasPrefix(state.URL, "https://127.0.0.1:") {
		t.Errorf("state file (-ready +written):\n%s\nurl %s", diff, state.URL)
	}

	resp, err := http.Post("http://"+state.ControlAddress+"/v1/instances", "application/json",
		strings.NewReader(`{"namespace":"ns","pod":"p","container":"c","cpu":"1"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("control POST = %d", resp.StatusCode)
	}

	ca, err := os.ReadFile(state.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no certificate in ca.crt")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequest(http.MethodGet, state.URL+"/v1/instances/metrics", nil)
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Accept", "application/json")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatalf("GET metrics over TLS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"uuid":"00000000-0000-4000-8000-000000000001"`) {
		t.Errorf("GET metrics = %d %s", resp.StatusCode, body)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}
