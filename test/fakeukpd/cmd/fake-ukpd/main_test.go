package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/util/cert"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good, empty := writeFile(t, dir, "token", "t1\n"), writeFile(t, dir, "empty", "# nothing\n")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "defaults with a token file", args: []string{"--token-file", good}},
		{name: "no token file", want: []string{"--token-file is required"}},
		{name: "missing token file", args: []string{"--token-file", filepath.Join(dir, "nope")}, want: []string{"--token-file: open"}},
		{name: "empty token file", args: []string{"--token-file", empty}, want: []string{"holds no token"}},
		{name: "bad addresses", args: []string{"--token-file", good, "--listen", "nowhere", "--control-address", "0.0.0.0:9000"}, want: []string{"--listen:", "not a loopback address"}},
		{name: "another host's loopback address, the SDK's form", args: []string{"--token-file", good, "--listen", "127.0.1.2:0", "--json-form", "sdk", "--cumulative-cpu"}},
		{name: "unknown JSON form", args: []string{"--token-file", good, "--json-form", "yaml"}, want: []string{`--json-form: unknown JSON form "yaml"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("fake-ukpd", pflag.ContinueOnError)
			o.AddFlags(fs)
			must(t, fs.Parse(tc.args))
			errs := o.Validate()
			ok := len(errs) == len(tc.want)
			for i := 0; ok && i < len(errs); i++ {
				ok = strings.Contains(errs[i].Error(), tc.want[i])
			}
			if !ok {
				t.Errorf("errors = %v, want %d containing %q", errs, len(tc.want), tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	must(t, os.WriteFile(path, []byte(data), 0o600))
	return path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunServesTLS(t *testing.T) {
	dir := t.TempDir()
	cfg := (&Options{Options: fakeukpd.Options{
		Config: fakeukpd.Config{TokenFile: writeFile(t, dir, "token", "secret\n")}, Listen: "127.0.0.1:0", ControlAddress: "127.0.0.1:0", CertDir: filepath.Join(dir, "tls"),
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

	written, err := fakecore.ReadState[fakeukpd.State](filepath.Join(dir, "tls", "ukpd.json"))
	must(t, err)
	if diff := cmp.Diff(state, *written); diff != "" || !strings.HasPrefix(state.URL, "https://127.0.0.1:") {
		t.Errorf("state file (-ready +written):\n%s\nurl %s", diff, state.URL)
	}
	spec := fakeukpd.InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1}
	must(t, (fakecore.Control{Address: state.ControlAddress}).Do(ctx, http.MethodPost, "/v1/instances", spec, nil, http.StatusCreated))

	pool, err := cert.NewPool(state.CAFile)
	must(t, err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequest(http.MethodGet, state.URL+"/v1/instances/metrics", nil)
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
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
