package options

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseconfig "k8s.io/component-base/config"
	cboptions "k8s.io/component-base/config/options"
	logsapi "k8s.io/component-base/logs/api/v1"

	// leader_election_master_status{name}, 0 or 1 on every replica: the
	// monitoring kit alerts when no replica leads.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/pkg/probe"
)

// CertControllerOptions are the flags of `group-metrics-server
// cert-controller`, which keeps the serving certificate and the caBundle
// under an identity of its own (pkg/certs).
type CertControllerOptions struct {
	Kubeconfig    string
	Namespace     string
	CASecret      string
	ServingSecret string
	DNSNames      []string
	APIServices   []string
	Service       string
	ServicePort   int32
	OwnerRole     string

	CAValidity      time.Duration
	ServingValidity time.Duration
	Propagation     time.Duration
	SyncPeriod      time.Duration
	RecreateAfter   time.Duration

	// MetricsBindAddress serves the controller's self-metrics on
	// /metrics; none when empty.
	MetricsBindAddress string

	LeaderElection componentbaseconfig.LeaderElectionConfiguration
	Logs           *logsapi.LoggingConfiguration
}

// NewCertControllerOptions returns the defaults, which match manifests/base.
func NewCertControllerOptions() *CertControllerOptions {
	return &CertControllerOptions{
		Namespace:     "kube-system",
		CASecret:      "group-metrics-server-ca",
		ServingSecret: "group-metrics-server-serving-cert",
		DNSNames:      []string{"group-metrics-server.kube-system.svc"},
		APIServices:   []string{"v1beta1.metrics.k8s.io", "v1.metrics.k8s.io"},
		Service:       "kube-system/group-metrics-server",
		ServicePort:   443,

		CAValidity:      10 * 365 * 24 * time.Hour,
		ServingValidity: 365 * 24 * time.Hour,
		// A Secret volume follows its Secret within the kubelet's sync
		// period plus its cache TTL (a minute each by default), and the
		// server checks its certificate files at least every minute.
		Propagation:   5 * time.Minute,
		SyncPeriod:    15 * time.Second,
		RecreateAfter: 10 * time.Second,

		MetricsBindAddress: ":8080",

		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       true,
			LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:      resourcelock.LeasesResourceLock,
			ResourceName:      "group-metrics-server-cert-controller",
			ResourceNamespace: "kube-system",
		},
		Logs: logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the flags, grouped for --help.
func (o *CertControllerOptions) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("certificate")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster; in-cluster configuration when empty.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the two Secrets.")
	fs.StringVar(&o.CASecret, "ca-secret", o.CASecret, "Secret that holds the CA and its key; only this controller reads it.")
	fs.StringVar(&o.ServingSecret, "serving-secret", o.ServingSecret, "Secret that holds the serving pair (tls.crt, tls.key) and the trusted CAs (ca.crt); the serving replicas mount it.")
	fs.StringSliceVar(&o.DNSNames, "dns-names", o.DNSNames, "DNS names the serving certificate covers; the aggregator verifies <service>.<namespace>.svc.")
	fs.StringSliceVar(&o.APIServices, "apiservices", o.APIServices, "APIServices whose caBundle is kept, and which are created again when deleted. Repeatable: each adds to the list.")
	fs.StringVar(&o.Service, "service", o.Service, "NAMESPACE/NAME of the Service the APIServices point at. An APIService that points elsewhere is left alone.")
	fs.Int32Var(&o.ServicePort, "service-port", o.ServicePort, "Port of the Service, for an APIService created again.")
	fs.StringVar(&o.OwnerRole, "owner-cluster-role", o.OwnerRole, "ClusterRole of the manifests that owns every APIService this controller creates again, so that deleting the manifests deletes it too. None when empty.")
	fs.DurationVar(&o.CAValidity, "ca-validity", o.CAValidity, "Lifetime of a new CA. It is replaced, in two phases, when a third of it remains.")
	fs.DurationVar(&o.ServingValidity, "serving-cert-validity", o.ServingValidity, "Lifetime of a new serving certificate. It is replaced when a third of it remains.")
	fs.DurationVar(&o.Propagation, "propagation-delay", o.Propagation, "Longest time from a Secret change to every serving replica serving from it (the kubelet's Secret volume sync and the server's file check), and from a caBundle change to the aggregator verifying with it.")
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "Longest time between two checks of the Secrets and APIServices.")
	fs.DurationVar(&o.RecreateAfter, "recreate-after", o.RecreateAfter, "How long a managed APIService must stay missing before it is created again.")
	fss.FlagSet("metrics").StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address (host:port) to serve the controller's self-metrics on, at /metrics, over plain HTTP: they hold counts and expiry times only. Off when empty.")
	cboptions.BindLeaderElectionFlags(&o.LeaderElection, fss.FlagSet("leader election"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate returns every problem with the flags.
func (o *CertControllerOptions) Validate() []error {
	var errs []error
	errs = append(errs, o.policy().Validate()...)
	if _, err := o.serviceRef(); err != nil {
		errs = append(errs, err)
	}
	if o.Namespace == "" || o.CASecret == "" || o.ServingSecret == "" {
		errs = append(errs, fmt.Errorf("--namespace, --ca-secret and --serving-secret must be set"))
	}
	if o.CASecret == o.ServingSecret {
		errs = append(errs, fmt.Errorf("--ca-secret and --serving-secret must differ: the serving replicas must not read the CA key"))
	}
	for _, n := range o.APIServices {
		if v, g, ok := strings.Cut(n, "."); !ok || v == "" || g == "" {
			errs = append(errs, fmt.Errorf("--apiservices: %q is not <version>.<group>", n))
		}
	}
	if o.SyncPeriod <= 0 || o.SyncPeriod > time.Hour {
		errs = append(errs, fmt.Errorf("--sync-period must be positive and at most 1h, got %s", o.SyncPeriod))
	}
	if o.RecreateAfter < 0 {
		errs = append(errs, fmt.Errorf("--recreate-after must not be negative, got %s", o.RecreateAfter))
	}
	if o.MetricsBindAddress != "" {
		if _, _, err := net.SplitHostPort(o.MetricsBindAddress); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-bind-address must be host:port, got %q: %w", o.MetricsBindAddress, err))
		}
	}
	if o.ServicePort < 1 || o.ServicePort > 65535 {
		errs = append(errs, fmt.Errorf("--service-port must be between 1 and 65535, got %d", o.ServicePort))
	}
	le := o.LeaderElection
	if le.LeaderElect && (le.RenewDeadline.Duration >= le.LeaseDuration.Duration || le.RetryPeriod.Duration <= 0) {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline must be below --leader-elect-lease-duration and --leader-elect-retry-period positive"))
	}
	return errs
}

func (o *CertControllerOptions) policy() certs.Policy {
	return certs.Policy{DNSNames: o.DNSNames, CAValidity: o.CAValidity, ServingValidity: o.ServingValidity, Propagation: o.Propagation}
}

func (o *CertControllerOptions) serviceRef() (certs.ServiceRef, error) {
	ns, name, ok := strings.Cut(o.Service, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return certs.ServiceRef{}, fmt.Errorf("--service must be NAMESPACE/NAME, got %q", o.Service)
	}
	return certs.ServiceRef{Namespace: ns, Name: name, Port: o.ServicePort}, nil
}

// Run builds the controller and runs it, under leader election when
// enabled, until ctx is done.
func (o *CertControllerOptions) Run(ctx context.Context) error {
	restCfg, err := (&Options{Kubeconfig: o.Kubeconfig}).restConfig()
	if err != nil {
		return err
	}
	restCfg.UserAgent = userAgent + "-cert-controller"
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	svc, err := o.serviceRef()
	if err != nil {
		return err
	}
	var owner *metav1.OwnerReference
	if o.OwnerRole != "" {
		role, err := kube.RbacV1().ClusterRoles().Get(ctx, o.OwnerRole, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("owner of created APIServices: %w", err)
		}
		owner = &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}
	}
	health := o.health()
	ctrl := certs.NewController(certs.ControllerConfig{
		Secrets:       kube.CoreV1(),
		Namespace:     o.Namespace,
		CASecret:      o.CASecret,
		ServingSecret: o.ServingSecret,
		APIServices: certs.NewAPIServices(certs.APIServicesConfig{
			Client:        dyn,
			Names:         o.APIServices,
			Service:       svc,
			RecreateAfter: o.RecreateAfter,
			Labels:        map[string]string{"app.kubernetes.io/name": "group-metrics-server"},
			Owner:         owner,
		}),
		Policy:     o.policy(),
		SyncPeriod: o.SyncPeriod,
		Health:     health,
	})
	if !o.LeaderElection.LeaderElect {
		health.StartedLeading()
		if err := o.serveMetricsAndHealth(ctx, health, nil); err != nil {
			return err
		}
		ctrl.Run(ctx)
		return nil
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	le := o.LeaderElection
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: host + "_" + uuid.NewString()})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	elector, watchdog, err := newCertElector(le, health.Lock(lock), health, ctrl.Run)
	if err != nil {
		return err
	}
	if err := o.serveMetricsAndHealth(ctx, health, watchdog); err != nil {
		return err
	}
	elector.Run(ctx)
	if ctx.Err() == nil {
		return fmt.Errorf("lost the leader lease %s/%s", le.ResourceNamespace, le.ResourceName)
	}
	return nil
}

// Bounds of the probes, in sync periods: a replica is ready while its
// syncs complete (or, standing by, while some replica renews the Lease)
// within readySyncs periods, and live while its syncs return within
// liveSyncs periods.
const (
	readySyncs = 3
	liveSyncs  = 20
)

func (o *CertControllerOptions) health() *certs.Health {
	ready := readySyncs * o.SyncPeriod
	if le := o.LeaderElection; le.LeaderElect {
		// A standby must give a leader that died a lease to expire and
		// another replica a retry to take it.
		ready = max(ready, 2*le.LeaseDuration.Duration+le.RetryPeriod.Duration)
	}
	return certs.NewHealth(certs.HealthConfig{ReadyWithin: ready, LiveWithin: liveSyncs * o.SyncPeriod})
}

// serveMetricsAndHealth serves the self-metrics and the probes when
// --metrics-bind-address is set. Every replica serves them; only the
// leader syncs, so only its expiry and last-success gauges are set.
func (o *CertControllerOptions) serveMetricsAndHealth(ctx context.Context, health *certs.Health, watchdog *leaderelection.HealthzAdaptor) error {
	if o.MetricsBindAddress == "" {
		return nil
	}
	live := []healthz.HealthChecker{probe.Logged("certificate-sync", health.Live)}
	if watchdog != nil {
		live = append(live, probe.Logged(watchdog.Name(), watchdog.Check))
	}
	ready := []healthz.HealthChecker{probe.Logged("certificate-sync-or-leader", health.Ready)}
	_, err := serveCertMetrics(ctx, o.MetricsBindAddress, live, ready)
	return err
}

// newCertElector returns the elector of the controller's Lease, which runs
// run while it leads. A Lease that is missing, deleted say, is created
// again by the elector: client-go's LeaseLock.Get returns the NotFound of
// the API, and tryAcquireOrRenew then calls LeaseLock.Create
// (k8s.io/client-go/tools/leaderelection/leaderelection.go, and
// resourcelock/leaselock.go), which the Role grants. The watchdog it
// returns fails the liveness probe of a leader that stopped renewing.
func newCertElector(le componentbaseconfig.LeaderElectionConfiguration, lock resourcelock.Interface, health *certs.Health, run func(context.Context)) (*leaderelection.LeaderElector, *leaderelection.HealthzAdaptor, error) {
	watchdog := leaderelection.NewLeaderHealthzAdaptor(le.RenewDeadline.Duration)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration.Duration,
		RenewDeadline:   le.RenewDeadline.Duration,
		RetryPeriod:     le.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            le.ResourceName,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				health.StartedLeading()
				run(ctx)
			},
			// Losing the lease ends the process: another replica leads,
			// and a fresh start cannot act on a stale view.
			OnStoppedLeading: health.StoppedLeading,
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("leader election: %w", err)
	}
	return elector, watchdog, nil
}
