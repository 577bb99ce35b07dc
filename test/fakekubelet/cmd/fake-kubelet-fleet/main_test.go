package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/cert"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(o *Options)
		want   []string
	}{
		{name: "valid", modify: func(o *Options) {}},
		{name: "no nodes", modify: func(o *Options) { o.Nodes = 0 }, want: []string{"set --nodes"}},
		{name: "no credentials", modify: func(o *Options) { o.CertDir = "" }, want: []string{"set at least one of"}},
		{name: "a client CA is a credential", modify: func(o *Options) { o.CertDir, o.ClientCAFile = "", "ca.crt" }},
		{name: "port range overflow", modify: func(o *Options) { o.BasePort = 65535 }, want: []string{"--base-port"}},
		{name: "register without kubeconfig", modify: func(o *Options) { o.RegisterNodes = true }, want: []string{"need --kubeconfig"}},
		{name: "control on a public address", modify: func(o *Options) { o.ControlAddress = "0.0.0.0:8080" }, want: []string{"not a loopback"}},
		{name: "bad quantity", modify: func(o *Options) { o.NodeMaxPods = "lots" }, want: []string{"--node-max-pods"}},
		{name: "every error at once", modify: func(o *Options) { o.Nodes, o.CertDir, o.NodeMaxPods = 0, "", "-1" },
			want: []string{"set --nodes", "set at least one of", "--node-max-pods must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.Nodes, o.CertDir = 2, "certs"
			tt.modify(o)
			errs := o.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors %v; want %d", len(errs), errs, len(tt.want))
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tt.want[i]) {
					t.Errorf("error %d is %q; want it to mention %q", i, err, tt.want[i])
				}
			}
		})
	}
}

func TestRunWritesCertDirAndServes(t *testing.T) {
	dir := t.TempDir()
	o := NewOptions()
	o.Nodes, o.CertDir = 3, dir
	cfg, err := o.Config()
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()

	var state *fakekubelet.FleetState
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		s, err := fakekubelet.ReadFleetState(dir)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		state = s
		return err == nil, err
	})
	if err != nil || len(state.Nodes) != 3 {
		t.Fatalf("fleet.json: %+v, %v; want 3 nodes", state, err)
	}

	pool, err := cert.NewPool(state.CAFile)
	must(t, err)
	keyPair, err := tls.LoadX509KeyPair(state.ClientCertFile, state.ClientKeyFile)
	must(t, err)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{keyPair}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(fmt.Sprintf("https://127.0.0.1:%d/stats/summary", state.Nodes[2].Port))
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"nodeName":"fake-node-2"`) {
		t.Errorf("summary with the written client certificate: %d %s", resp.StatusCode, body)
	}
	if err := (fakecore.Control{Address: state.ControlAddress}).Do(ctx, http.MethodGet, "/healthz", nil, nil); err != nil {
		t.Errorf("control healthz: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
