package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// newCommand is the fleet's program: run the fleet its options describe.
func newCommand() *fakecore.Command {
	opts := NewOptions()
	return fakecore.NewCommand("fake-kubelet-fleet", opts, func(ctx context.Context) error {
		cfg, err := opts.Config()
		if err != nil {
			return err
		}
		return run(ctx, cfg)
	})
}

func run(ctx context.Context, cfg *Config) (err error) {
	client, err := clusterClient(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	if cfg.TokenReview {
		cfg.Fleet.TokenAuthenticator = fakekubelet.NewTokenReviewAuthenticator(client, time.Minute)
	}
	fleet, err := fakekubelet.NewFleet(cfg.Fleet)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, fleet.Close()) }()
	for i, name := range cfg.NodeNames {
		port := 0
		if cfg.BasePort > 0 {
			port = cfg.BasePort + i
		}
		if _, err := fleet.AddNode(name, port); err != nil {
			return err
		}
	}
	control, controlAddress, err := fakecore.Listen(cfg.ControlAddress, fakekubelet.NewControlHandler(fleet))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, control.Stop()) }()

	if cfg.PodInformer {
		if err := fleet.StartPodInformer(ctx, client); err != nil {
			return err
		}
	}
	if cfg.RegisterNodes {
		if err := fleet.RegisterNodes(ctx, client, cfg.Registration); err != nil {
			return err
		}
	}
	if cfg.CertDir != "" {
		if err := writeCertDir(cfg.CertDir, fleet, controlAddress); err != nil {
			return err
		}
	}
	klog.InfoS("Fake kubelet fleet ready", "nodes", len(cfg.NodeNames), "controlAddress", controlAddress)
	select {
	case <-ctx.Done():
		return nil
	case <-control.Done():
		return fmt.Errorf("control API stopped: %w", control.Err())
	}
}

// clusterClient returns a client for kubeconfig, or nil without one.
func clusterClient(kubeconfig string) (kubernetes.Interface, error) {
	if kubeconfig == "" {
		return nil, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 200, 400
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	return client, nil
}

// writeCertDir writes the CA, a client certificate the nodes accept and,
// last, fleet.json, each atomically.
func writeCertDir(dir string, fleet *fakekubelet.Fleet, controlAddress string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cert dir: %w", err)
	}
	certPEM, keyPEM, err := fleet.IssueClientCertificate("fake-kubelet-client")
	if err != nil {
		return err
	}
	f := fakekubelet.FleetState{
		ControlAddress: controlAddress,
		CAFile:         filepath.Join(dir, "ca.crt"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	for _, n := range fleet.Nodes() {
		f.Nodes = append(f.Nodes, n.State(false))
	}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{f.CAFile, fleet.CACertPEM(), 0o644},
		{f.ClientCertFile, certPEM, 0o644},
		{f.ClientKeyFile, keyPEM, 0o600},
	} {
		if err := fakecore.WriteAtomic(w.path, w.data, w.mode); err != nil {
			return err
		}
	}
	return fakecore.WriteState(filepath.Join(dir, fakekubelet.StateFileName), f)
}
