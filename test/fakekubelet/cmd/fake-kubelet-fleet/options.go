package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// Options are the command-line options of fake-kubelet-fleet.
type Options struct {
	Kubeconfig     string
	Nodes          int
	NodeNames      []string
	NodeNamePrefix string
	BasePort       int
	Tokens         []string
	TokenFile      string
	TokenReview    bool
	ClientCAFile   string
	CertDir        string
	ControlAddress string
	RegisterNodes  bool
	NodeLabels     map[string]string
	PodInformer    bool
	SampleInterval time.Duration
	DefaultCPU     string
	DefaultMemory  string
	NodeBaseCPU    string
	NodeBaseMemory string
	NodeCPU        string
	NodeMemory     string
	NodeMaxPods    string
}

// NewOptions returns the default options.
func NewOptions() *Options {
	return &Options{
		NodeNamePrefix: "fake-node-",
		ControlAddress: "127.0.0.1:0",
		PodInformer:    true,
		SampleInterval: fakekubelet.DefaultSampleInterval,
		DefaultCPU:     "1m",
		DefaultMemory:  "10Mi",
		NodeBaseCPU:    "100m",
		NodeBaseMemory: "512Mi",
		NodeCPU:        "32",
		NodeMemory:     "256Gi",
		NodeMaxPods:    "110",
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster; enables the pod informer, --register-nodes and --authentication-token-webhook.")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "Number of nodes, named <node-name-prefix><i> from 0. Ignored when --node-names is set.")
	fs.StringSliceVar(&o.NodeNames, "node-names", o.NodeNames, "Comma-separated node names.")
	fs.StringVar(&o.NodeNamePrefix, "node-name-prefix", o.NodeNamePrefix, "Prefix of generated node names.")
	fs.IntVar(&o.BasePort, "base-port", o.BasePort, "Port of the first node; node i listens on base-port+i. 0 picks free ports.")
	fs.StringArrayVar(&o.Tokens, "token", o.Tokens, "Accepted bearer token (repeatable).")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "File of accepted bearer tokens, one a line.")
	fs.BoolVar(&o.TokenReview, "authentication-token-webhook", o.TokenReview, "Also accept tokens that the cluster's TokenReview API authenticates.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA bundle that client certificates may chain to (the fleet CA is always accepted).")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "Directory to write ca.crt, client.crt, client.key and fleet.json into.")
	fs.StringVar(&o.ControlAddress, "control-address", o.ControlAddress, "Loopback host:port of the plain-HTTP control API.")
	fs.BoolVar(&o.RegisterNodes, "register-nodes", o.RegisterNodes, "Create kwok-managed Node objects with InternalIP 127.0.0.1 and each node's kubelet port.")
	fs.StringToStringVar(&o.NodeLabels, "node-labels", o.NodeLabels, "Extra labels of registered nodes, k=v,...")
	fs.BoolVar(&o.PodInformer, "pod-informer", o.PodInformer, "Serve the Running pods bound to the fleet's nodes (needs --kubeconfig).")
	fs.DurationVar(&o.SampleInterval, "sample-interval", o.SampleInterval, "Quantum of sample timestamps; negative means exact times.")
	fs.StringVar(&o.DefaultCPU, "default-cpu", o.DefaultCPU, "CPU rate of a container until one is set (quantity, cores).")
	fs.StringVar(&o.DefaultMemory, "default-memory", o.DefaultMemory, "Working set of a container until one is set (quantity, bytes).")
	fs.StringVar(&o.NodeBaseCPU, "node-base-cpu", o.NodeBaseCPU, "CPU rate of each node on top of its pods.")
	fs.StringVar(&o.NodeBaseMemory, "node-base-memory", o.NodeBaseMemory, "Working set of each node on top of its pods.")
	fs.StringVar(&o.NodeCPU, "node-cpu", o.NodeCPU, "CPU capacity of registered nodes.")
	fs.StringVar(&o.NodeMemory, "node-memory", o.NodeMemory, "Memory capacity of registered nodes (and of every node's availableBytes).")
	fs.StringVar(&o.NodeMaxPods, "node-max-pods", o.NodeMaxPods, "Pod capacity of registered nodes.")
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	if len(o.NodeNames) == 0 && o.Nodes <= 0 {
		errs = append(errs, errors.New("set --nodes to a positive number or --node-names"))
	}
	if o.BasePort < 0 || o.BasePort > 65535 || (o.BasePort > 0 && o.BasePort+len(o.nodeNames())-1 > 65535) {
		errs = append(errs, fmt.Errorf("--base-port %d does not leave room for %d nodes", o.BasePort, len(o.nodeNames())))
	}
	if len(o.Tokens) == 0 && o.TokenFile == "" && o.ClientCAFile == "" && !o.TokenReview {
		errs = append(errs, errors.New("set at least one of --token, --token-file, --client-ca-file, --authentication-token-webhook"))
	}
	if o.Kubeconfig == "" && (o.RegisterNodes || o.TokenReview) {
		errs = append(errs, errors.New("--register-nodes and --authentication-token-webhook need --kubeconfig"))
	}
	if err := fakecore.CheckLoopback("control-address", o.ControlAddress); err != nil {
		errs = append(errs, err)
	}
	for _, q := range []struct{ flag, value string }{
		{"default-cpu", o.DefaultCPU}, {"default-memory", o.DefaultMemory},
		{"node-base-cpu", o.NodeBaseCPU}, {"node-base-memory", o.NodeBaseMemory},
		{"node-cpu", o.NodeCPU}, {"node-memory", o.NodeMemory}, {"node-max-pods", o.NodeMaxPods},
	} {
		if v, err := resource.ParseQuantity(q.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", q.flag, err))
		} else if v.Sign() < 0 {
			errs = append(errs, fmt.Errorf("--%s must not be negative", q.flag))
		}
	}
	return errs
}

func (o *Options) nodeNames() []string {
	if len(o.NodeNames) > 0 {
		return o.NodeNames
	}
	names := make([]string, o.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", o.NodeNamePrefix, i)
	}
	return names
}

// Config is what a run needs: the validated options (the pod informer off
// without a kubeconfig) and what they derive.
type Config struct {
	Options
	Fleet fakekubelet.Config
	// NodeNames are --node-names, or the names --nodes makes.
	NodeNames    []string
	Registration fakekubelet.NodeRegistration
}

// Config reads the token and CA files and builds the run configuration.
func (o *Options) Config() (*Config, error) {
	tokens := append([]string(nil), o.Tokens...)
	if o.TokenFile != "" {
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("read --token-file: %w", err)
		}
		tokens = append(tokens, fakecore.ParseTokens(string(b))...)
	}
	fc := fakekubelet.Config{
		SampleInterval:          o.SampleInterval,
		Tokens:                  tokens,
		DefaultUsage:            usage(o.DefaultCPU, o.DefaultMemory),
		NodeBaseUsage:           usage(o.NodeBaseCPU, o.NodeBaseMemory),
		NodeMemoryCapacityBytes: usage("0", o.NodeMemory).MemoryBytes,
	}
	if o.ClientCAFile != "" {
		b, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("read --client-ca-file: %w", err)
		}
		fc.ClientCAPEM = b
	}
	cfg := &Config{
		Options:   *o,
		Fleet:     fc,
		NodeNames: o.nodeNames(),
		Registration: fakekubelet.NodeRegistration{
			Labels: o.NodeLabels,
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(o.NodeCPU),
				corev1.ResourceMemory: resource.MustParse(o.NodeMemory),
				corev1.ResourcePods:   resource.MustParse(o.NodeMaxPods),
			},
		},
	}
	cfg.PodInformer = o.PodInformer && o.Kubeconfig != ""
	return cfg, nil
}

func usage(cpu, memory string) fakekubelet.Usage {
	c, m := resource.MustParse(cpu), resource.MustParse(memory)
	return fakekubelet.Usage{CPUNanoCores: uint64(c.ScaledValue(resource.Nano)), MemoryBytes: uint64(m.Value())}
}
