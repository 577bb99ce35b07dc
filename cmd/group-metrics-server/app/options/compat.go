package options

import (
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json and --log-json-*, as metrics-server registers them
	"k8s.io/component-base/metrics"
)

// The options below are those metrics-server v0.8.0 takes from
// k8s.io/apiserver and component-base (cmd/metrics-server/app/options/
// options.go in kubernetes-sigs/metrics-server): the same option types,
// so every flag it accepts means the same here. A Deployment or Helm
// values written for metrics-server keep working when only the image
// changes.

// addGenericFlags adds the generic apiserver's run options (shutdown delay,
// max in-flight, request timeouts, feature gates and emulated version),
// its audit options and component-base's metrics options.
func (o *Options) addGenericFlags(fss *cliflag.NamedFlagSets) {
	o.ServerRun.AddUniversalFlags(fss.FlagSet("generic"))
	o.Audit.AddFlags(fss.FlagSet("audit log"))
	o.Metrics.AddFlags(fss.FlagSet("self-metrics"))
}

// validateGeneric returns every problem with the generic options.
func (o *Options) validateGeneric() []error {
	var errs []error
	errs = append(errs, o.ServerRun.Validate()...)
	errs = append(errs, o.Audit.Validate()...)
	errs = append(errs, o.Metrics.Validate()...)
	return errs
}

// SetGlobals applies --feature-gates and --emulated-version, as
// kube-apiserver does right after parsing: validation and the logging
// options read them.
func (o *Options) SetGlobals() error {
	if err := o.ServerRun.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("--feature-gates / --emulated-version: %w", err)
	}
	return nil
}

// Complete applies, after validation, what must take effect before
// anything else runs: logging (--logging-format, -v, ...) and the
// self-metrics options, which must be set before any metric registers. It
// returns the warnings for flags that are accepted for compatibility and
// ignored: the caller logs them, logging being set up.
func (o *Options) Complete() (ignored []string, err error) {
	if err := logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate); err != nil {
		return nil, err
	}
	o.Metrics.Apply()
	return o.ignoredFlags(), nil
}

// ignoredFlags turns off what is accepted but means nothing here, and says
// so.
func (o *Options) ignoredFlags() []string {
	var out []string
	if o.DeprecatedKubeletCompletelyInsecure {
		// metrics-server's flag sends the Summary API request over plain
		// HTTP with no credentials. This server reaches kubelets over TLS
		// only; a test cluster whose kubelets have self-signed serving
		// certificates wants --kubelet-insecure-tls.
		o.DeprecatedKubeletCompletelyInsecure = false
		out = append(out, "--deprecated-kubelet-completely-insecure is ignored: kubelets are always reached over TLS (use --kubelet-insecure-tls for self-signed kubelet certificates)")
	}
	if o.Features.EnablePriorityAndFairness {
		// metrics-server accepts the flag but never applies its feature
		// options, so requests are bounded by the max in-flight filter
		// either way; here too.
		o.Features.EnablePriorityAndFairness = false
		out = append(out, "--enable-priority-and-fairness is ignored: requests are bounded by --max-requests-inflight and --max-concurrent-reads, as metrics-server bounds them")
	}
	return out
}

// applyGeneric applies the generic run options and the audit options to
// the server's configuration.
func (o *Options) applyGeneric(c *genericapiserver.Config) error {
	if err := o.ServerRun.ApplyTo(c); err != nil {
		return err
	}
	if err := o.Audit.ApplyTo(c); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// The logging feature gates (LoggingAlphaOptions, LoggingBetaOptions, ...)
// join the generic apiserver's gate that --feature-gates sets, as
// kube-apiserver adds them.
func init() {
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

func newGenericOptions() (*genericoptions.ServerRunOptions, *genericoptions.AuditOptions, *metrics.Options) {
	// NewServerRunOptions registers the "kube" component with the generic
	// apiserver's feature gate (which holds the apiserver's and logging's
	// features), so --feature-gates=LoggingAlphaOptions=true works.
	return genericoptions.NewServerRunOptions(), genericoptions.NewAuditOptions(), metrics.NewOptions()
}
