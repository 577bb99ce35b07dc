// Command fake-kubelet-fleet runs a fleet of fake kubelets on 127.0.0.1,
// one TLS endpoint per node, with a plain-HTTP control API on loopback.
package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

func main() { fakecore.Main(newCommand()) }

// newCommand is the fleet's program: run the fleet its options describe.
func newCommand() *cobra.Command {
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
	for i := range cfg.Nodes {
		port := 0
		if cfg.BasePort > 0 {
			port = cfg.BasePort + i
		}
		if _, err := fleet.AddNode(fmt.Sprintf("%s%d", cfg.NodeNamePrefix, i), port); err != nil {
			return err
		}
	}
	if client != nil {
		if err := fleet.StartPodInformer(ctx, client); err != nil {
			return err
		}
	}
	if cfg.RegisterNodes {
		if err := fleet.RegisterNodes(ctx, client, cfg.Registration); err != nil {
			return err
		}
	}
	ctl, addr, err := fakecore.Listen(cfg.ControlAddress, fakekubelet.NewControlHandler(fleet))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ctl.Stop()) }()
	if cfg.CertDir != "" {
		if err := writeCertDir(cfg.CertDir, fleet, addr); err != nil {
			return err
		}
	}
	klog.InfoS("Fake ready", "fake", "fake kubelet fleet", "controlAddress", addr)
	<-ctx.Done()
	return nil
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
// last and atomically, fleet.json.
func writeCertDir(dir string, fleet *fakekubelet.Fleet, controlAddress string) error {
	certPEM, keyPEM, err := fleet.IssueClientCertificate("fake-kubelet-client")
	if err != nil {
		return err
	}
	f := fakekubelet.FleetState{ControlAddress: controlAddress, CAFile: filepath.Join(dir, "ca.crt"),
		ClientCertFile: filepath.Join(dir, "client.crt"), ClientKeyFile: filepath.Join(dir, "client.key")}
	for _, n := range fleet.Nodes() {
		f.Nodes = append(f.Nodes, n.State(false))
	}
	if err := errors.Join(cert.WriteCert(f.CAFile, fleet.CACertPEM()), cert.WriteCert(f.ClientCertFile, certPEM), keyutil.WriteKey(f.ClientKeyFile, keyPEM)); err != nil {
		return err
	}
	return fakecore.WriteState(filepath.Join(dir, fakekubelet.StateFileName), f)
}
