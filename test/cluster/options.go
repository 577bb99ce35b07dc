package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Options configures a local control plane. Zero values select the defaults
// documented on each field.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubectl and kwok. Required.
	BinDir string
	// KubeBinDir, when set, holds the Kubernetes binaries (kube-apiserver,
	// kube-controller-manager, kube-scheduler, kubectl) of another release,
	// used instead of those in BinDir (make e2e-compat).
	KubeBinDir string
	// WorkDir receives the PKI, kubeconfigs, etcd data and logs/<name>.log.
	// Start clears those from an earlier run; Stop leaves them in place. If
	// empty, a temporary directory is created and Stop removes it.
	WorkDir string
	// StartTimeout bounds Start. Default 2 minutes.
	StartTimeout time.Duration
	// The kube-controller-manager flags --horizontal-pod-autoscaler-sync-period
	// (default 2s), -downscale-stabilization, -cpu-initialization-period and
	// -initial-readiness-delay (default 5s each).
	HPASyncPeriod, HPADownscaleStabilization, HPACPUInitializationPeriod, HPAInitialReadinessDelay time.Duration
	// WithoutScheduler skips kube-scheduler; pods then need spec.nodeName.
	WithoutScheduler bool
	// ControllerManagerArgs are appended to kube-controller-manager's
	// command line, so they override this package's flags.
	ControllerManagerArgs []string
}

// Binary names expected in Options.BinDir.
const (
	EtcdBinary              = "etcd"
	APIServerBinary         = "kube-apiserver"
	ControllerManagerBinary = "kube-controller-manager"
	SchedulerBinary         = "kube-scheduler"
	KubectlBinary           = "kubectl"
	KwokBinary              = "kwok"
	MetricsServerBinary     = "metrics-server"
)

func (o Options) withDefaults() Options {
	o.StartTimeout = cmp.Or(o.StartTimeout, 2*time.Minute)
	o.HPASyncPeriod = cmp.Or(o.HPASyncPeriod, 2*time.Second)
	o.HPADownscaleStabilization = cmp.Or(o.HPADownscaleStabilization, 5*time.Second)
	o.HPACPUInitializationPeriod = cmp.Or(o.HPACPUInitializationPeriod, 5*time.Second)
	o.HPAInitialReadinessDelay = cmp.Or(o.HPAInitialReadinessDelay, 5*time.Second)
	return o
}

// binPath is where the binary name is found: KubeBinDir for the Kubernetes
// binaries when it is set, BinDir otherwise.
func (o Options) binPath(name string) string {
	kube := []string{APIServerBinary, ControllerManagerBinary, SchedulerBinary, KubectlBinary}
	if o.KubeBinDir != "" && slices.Contains(kube, name) {
		return filepath.Join(o.KubeBinDir, name)
	}
	return filepath.Join(o.BinDir, name)
}

// validate reports every problem with the options, not only the first.
func (o Options) validate() error {
	var errs []error
	if o.BinDir == "" {
		errs = append(errs, errors.New("BinDir is required"))
	} else {
		bins := []string{EtcdBinary, APIServerBinary, ControllerManagerBinary, KubectlBinary, KwokBinary}
		if !o.WithoutScheduler {
			bins = append(bins, SchedulerBinary)
		}
		for _, b := range bins {
			path := o.binPath(b)
			info, err := os.Stat(path)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("binary %s: %w", path, err))
			case info.IsDir() || info.Mode()&0o111 == 0:
				errs = append(errs, fmt.Errorf("binary %s is not executable", path))
			}
		}
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"StartTimeout", o.StartTimeout},
		{"HPASyncPeriod", o.HPASyncPeriod},
		{"HPADownscaleStabilization", o.HPADownscaleStabilization},
		{"HPACPUInitializationPeriod", o.HPACPUInitializationPeriod},
		{"HPAInitialReadinessDelay", o.HPAInitialReadinessDelay},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %v", d.name, d.value))
		}
	}
	return errors.Join(errs...)
}
