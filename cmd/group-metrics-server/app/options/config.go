package options

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/pkg/apiserver"
	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/server"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/kubelet"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
)

const userAgent = "group-metrics-server"

// ServerConfig turns validated options into a server.Config. It reads from
// the cluster only, and waits for the serving certificate files to appear.
func (o *Options) ServerConfig(ctx context.Context) (*server.Config, error) {
	restCfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(protobuf(restCfg))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}

	if ck := o.SecureServing.ServerCert.CertKey; ck.CertFile != "" {
		// Mounted from a Secret that the certificate controller fills: the
		// pair may not be there yet on a fresh install. Once loaded,
		// k8s.io/apiserver reloads it whenever the files change.
		if err := waitForFiles(ctx, ck.CertFile, ck.KeyFile); err != nil {
			return nil, err
		}
	} else if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, loopbackIPs); err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}

	// The delegated checks reach the same cluster unless told otherwise.
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = o.Kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = o.Kubeconfig
	}

	api := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	if err := o.SecureServing.ApplyTo(&api.SecureServing, &api.LoopbackClientConfig); err != nil {
		return nil, err
	}
	if err := o.Authentication.ApplyTo(&api.Authentication, api.SecureServing, nil); err != nil {
		return nil, err
	}
	if err := o.Authorization.ApplyTo(&api.Authorization); err != nil {
		return nil, err
	}
	if err := o.Features.ApplyTo(&api.Config, kube, nil); err != nil {
		return nil, err
	}
	if err := o.applyGeneric(&api.Config); err != nil {
		return nil, err
	}

	addrTypes, err := o.addressTypes()
	if err != nil {
		return nil, err
	}
	selector, err := labels.Parse(o.NodeSelector)
	if err != nil {
		return nil, err
	}
	kraftlet, err := labels.Parse(o.KraftletNodeSelector)
	if err != nil {
		return nil, err
	}
	endpoints, errs := o.ukpdEndpoints()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	podMetrics, errs := o.podMetricsConfig()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return &server.Config{
		API:      api,
		Kube:     kube,
		Metadata: meta,
		Dynamic:  dyn,
		Kubelet: kubelet.ClientConfig{
			REST:             o.kubeletREST(restCfg),
			MaxResponseBytes: o.KubeletMaxResponseBytes,
			Endpoint:         kubelet.Endpoint(o.KubeletEndpoint),
		},
		KubeletPort:              o.KubeletPort,
		KubeletUseNodeStatusPort: o.KubeletUseNodeStatusPort,
		KubeletAddressTypes:      addrTypes,
		NodeSelector:             selector,
		KraftletSelector:         kraftlet,
		Sources:                  o.Sources,
		Ukpd: ukpd.SourceConfig{
			Endpoints:             endpoints,
			TokenFile:             o.UkpdTokenFile,
			CAFile:                o.UkpdCAFile,
			InsecureSkipTLSVerify: o.UkpdInsecureTLS,
			ListRefresh:           o.UkpdListRefresh,
			RequiredTags:          o.UkpdRequiredTags,
			Relays:                o.ukpdRelays(restCfg, addrTypes),
		},
		DefaultGroupPolicy: group.Policy(o.DefaultGroupPolicy),
		Readiness: group.Readiness{
			CPUInitializationPeriod: o.HPACPUInitializationPeriod,
			InitialReadinessDelay:   o.HPAInitialReadinessDelay,
		},
		CustomMetrics:      o.EnableCustomMetrics,
		GroupMetricsSeries: o.GroupMetricsSeries,
		PodMetrics:         podMetrics,
		Resolution:         o.MetricResolution,
		Timeout:            o.KubeletRequestTimeout,
		Concurrency:        o.MaxConcurrentScrapes,
		Reads:              apiserver.ReadLimit{Concurrent: o.concurrentReads(), Wait: readWait, Priority: o.PriorityReaders},
	}, nil
}

func (o *Options) restConfig() (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// kubeletREST derives the kubelet client configuration from the cluster's:
// the same credentials (bearer token, re-read from its file as it rotates),
// verified against --kubelet-certificate-authority or else the cluster CA.
func (o *Options) kubeletREST(cluster *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(cluster)
	cfg.Host = ""
	tls := rest.TLSClientConfig{
		CAFile: cluster.CAFile,
		CAData: cluster.CAData,
	}
	switch {
	case o.KubeletInsecureTLS:
		tls = rest.TLSClientConfig{Insecure: true}
	case o.KubeletCAFile != "":
		tls = rest.TLSClientConfig{CAFile: o.KubeletCAFile}
	}
	if o.KubeletClientCertFile != "" {
		tls.CertFile, tls.KeyFile = o.KubeletClientCertFile, o.KubeletClientKeyFile
		cfg.BearerToken, cfg.BearerTokenFile = "", ""
	} else {
		tls.CertFile, tls.KeyFile = cluster.CertFile, cluster.KeyFile
		tls.CertData, tls.KeyData = cluster.CertData, cluster.KeyData
	}
	cfg.TLSClientConfig = tls
	return cfg
}

// ukpdRelays configures the per-host relays, if --ukpd-relay-port is set:
// the kubelets' credential (the relays review it with the API server as
// kubelets do), verified against --ukpd-relay-certificate-authority or else
// the cluster CA, for --ukpd-relay-server-name if set.
func (o *Options) ukpdRelays(cluster *rest.Config, addrTypes []corev1.NodeAddressType) ukpd.RelayConfig {
	if o.UkpdRelayPort == 0 {
		return ukpd.RelayConfig{}
	}
	cfg := rest.CopyConfig(cluster)
	cfg.Host = ""
	cfg.TLSClientConfig = rest.TLSClientConfig{CAFile: cluster.CAFile, CAData: cluster.CAData, ServerName: o.UkpdRelayServerName}
	if o.UkpdRelayCAFile != "" {
		cfg.TLSClientConfig = rest.TLSClientConfig{CAFile: o.UkpdRelayCAFile, ServerName: o.UkpdRelayServerName}
	}
	return ukpd.RelayConfig{Port: o.UkpdRelayPort, REST: cfg, AddressTypes: addrTypes}
}

// waitForFiles returns once every file exists and is not empty, or when ctx
// is done.
func waitForFiles(ctx context.Context, files ...string) error {
	logged := false
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		for _, f := range files {
			if st, err := os.Stat(f); err != nil || st.Size() == 0 {
				if !logged {
					klog.InfoS("Waiting for the serving certificate", "file", f)
					logged = true
				}
				return false, nil
			}
		}
		return true, nil
	})
}

// readWait is the longest a metrics API request waits for a slot under
// --max-concurrent-reads.
const readWait = 10 * time.Second

// concurrentReads resolves --max-concurrent-reads: by default one read per
// CPU the process may use. A read is CPU-bound (the list, its conversion and
// its encoding), so more at once finish no sooner and only hold more memory;
// fewer leave CPUs idle while reads queue. The scrape loop needs a small
// share of a CPU, which the Go scheduler's preemption gives it among the
// reads.
func (o *Options) concurrentReads() int {
	if o.MaxConcurrentReads > 0 {
		return o.MaxConcurrentReads
	}
	return runtime.GOMAXPROCS(0)
}

// protobuf returns cfg for a typed client speaking protobuf: the pod
// informer's initial list and its watch decode several times faster, with a
// fraction of the garbage, than in JSON. (Dynamic clients need JSON, so cfg
// itself is left alone.)
func protobuf(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = "application/vnd.kubernetes.protobuf"
	out.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return out
}
