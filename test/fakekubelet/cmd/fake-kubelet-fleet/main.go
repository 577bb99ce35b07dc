// Command fake-kubelet-fleet runs a fleet of fake kubelets on 127.0.0.1,
// one TLS endpoint per node, with a plain-HTTP control API on loopback.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

func main() { fakecore.Main(newCommand()) }

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

// Options are the command-line options of fake-kubelet-fleet.
type Options struct {
	Kubeconfig     string
	Nodes          int
	NodeNamePrefix string
	BasePort       int
	TokenReview    bool
	ClientCAFile   string
	CertDir        string
	ControlAddress string
	RegisterNodes  bool
	NodeLabels     map[string]string
	NodeMaxPods    string
}

// The capacity registered nodes declare; the fleet serves the library's
// default usage (fakekubelet.DefaultContainerCPU and the like) until the
// control API says otherwise.
var nodeCPU, nodeMemory = resource.MustParse("32"), resource.MustParse("256Gi")

// NewOptions returns the default options.
func NewOptions() *Options {
	return &Options{NodeNamePrefix: "fake-node-", ControlAddress: "127.0.0.1:0", NodeMaxPods: "110"}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster; the fleet then serves the Running pods bound to its nodes, and --register-nodes and --authentication-token-webhook work.")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "Number of nodes, named <node-name-prefix><i> from 0.")
	fs.StringVar(&o.NodeNamePrefix, "node-name-prefix", o.NodeNamePrefix, "Prefix of the node names.")
	fs.IntVar(&o.BasePort, "base-port", o.BasePort, "Port of the first node; node i listens on base-port+i. 0 picks free ports.")
	fs.BoolVar(&o.TokenReview, "authentication-token-webhook", o.TokenReview, "Also accept tokens that the cluster's TokenReview API authenticates.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA bundle that client certificates may chain to (the fleet CA is always accepted).")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "Directory to write ca.crt, client.crt and client.key (a client certificate every node accepts) and fleet.json into.")
	fs.StringVar(&o.ControlAddress, "control-address", o.ControlAddress, "Loopback host:port of the plain-HTTP control API.")
	fs.BoolVar(&o.RegisterNodes, "register-nodes", o.RegisterNodes, "Create kwok-managed Node objects with InternalIP 127.0.0.1 and each node's kubelet port.")
	fs.StringToStringVar(&o.NodeLabels, "node-labels", o.NodeLabels, "Extra labels of registered nodes, k=v,...")
	fs.StringVar(&o.NodeMaxPods, "node-max-pods", o.NodeMaxPods, "Pod capacity of registered nodes.")
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.Nodes <= 0 {
		errs = append(errs, errors.New("set --nodes to a positive number"))
	}
	if o.BasePort < 0 || o.BasePort > 65535 || (o.BasePort > 0 && o.BasePort+o.Nodes-1 > 65535) {
		errs = append(errs, fmt.Errorf("--base-port %d does not leave room for %d nodes", o.BasePort, o.Nodes))
	}
	if o.CertDir == "" && o.ClientCAFile == "" && !o.TokenReview {
		errs = append(errs, errors.New("set at least one of --cert-dir, --client-ca-file, --authentication-token-webhook"))
	}
	if o.Kubeconfig == "" && (o.RegisterNodes || o.TokenReview) {
		errs = append(errs, errors.New("--register-nodes and --authentication-token-webhook need --kubeconfig"))
	}
	if err := fakecore.CheckLoopback("control-address", o.ControlAddress); err != nil {
		errs = append(errs, err)
	}
	if v, err := resource.ParseQuantity(o.NodeMaxPods); err != nil {
		errs = append(errs, fmt.Errorf("--node-max-pods: %w", err))
	} else if v.Sign() < 0 {
		errs = append(errs, errors.New("--node-max-pods must not be negative"))
	}
	return errs
}

// Config is what a run needs: the validated options and what they derive.
type Config struct {
	Options
	Fleet        fakekubelet.Config
	Registration fakekubelet.NodeRegistration
}

// Config reads the CA file and builds the run configuration.
func (o *Options) Config() (*Config, error) {
	cfg := &Config{
		Options: *o,
		Fleet:   fakekubelet.Config{NodeMemoryCapacityBytes: uint64(nodeMemory.Value())},
		Registration: fakekubelet.NodeRegistration{Labels: o.NodeLabels, Capacity: corev1.ResourceList{
			corev1.ResourceCPU:    nodeCPU,
			corev1.ResourceMemory: nodeMemory,
			corev1.ResourcePods:   resource.MustParse(o.NodeMaxPods),
		}},
	}
	if o.ClientCAFile != "" {
		var err error
		if cfg.Fleet.ClientCAPEM, err = os.ReadFile(o.ClientCAFile); err != nil {
			return nil, fmt.Errorf("read --client-ca-file: %w", err)
		}
	}
	return cfg, nil
}
