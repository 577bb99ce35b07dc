package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

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
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatalf("fleet.json: %v", err)
	}
	if len(state.Nodes) != 3 {
		t.Fatalf("fleet.json lists %d nodes, want 3", len(state.Nodes))
	}

	caPEM, err := os.ReadFile(state.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(state.ClientCertFile, state.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/stats/summary", state.Nodes[2].Port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"nodeName":"fake-node-2"`) {
		t.Errorf("summary with the written client certificate: %d %s", resp.StatusCode, body)
	}

	resp, err = http.Get("http://" + state.ControlAddress + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("control healthz: %d", resp.StatusCode)
	}

	cancel()
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-guard.C:
		t.Fatal("run did not return after its context ended")
	}
}
