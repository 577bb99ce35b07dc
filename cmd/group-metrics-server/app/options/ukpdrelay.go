package options

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/ukpd"
	"github.com/group-metrics-server/group-metrics-server/pkg/ukpdrelay"
)

// UkpdRelayOptions are the flags of `group-metrics-server ukpd-relay`, which
// serves a host's loopback ukpd to the server over TLS (pkg/ukpdrelay).
type UkpdRelayOptions struct {
	SecureServing *genericoptions.SecureServingOptions
	// Kubeconfig reaches the cluster whose TokenReviews and
	// SubjectAccessReviews admit readers; in-cluster when empty.
	Kubeconfig string
	// NodeName is the kraftlet node of the host: readers must be allowed
	// to get its nodes/stats.
	NodeName string

	UkpdURL              string
	UkpdTokenFile        string
	UkpdCAFile           string
	UkpdRequestTimeout   time.Duration
	UkpdMaxResponseBytes int64

	Logs *logsapi.LoggingConfiguration
}

// UkpdRelayPort is the relay's default port, next to ukpd's 45232.
const UkpdRelayPort = 45242

// The delegated checks, as the kubelet's configuration defaults them
// (authentication.webhook.cacheTTL, authorization.webhook.cacheAuthorizedTTL
// and cacheUnauthorizedTTL), and k8s.io/apiserver's TokenReview timeout.
const (
	relayTokenCacheTTL = 2 * time.Minute
	relayAllowCacheTTL = 5 * time.Minute
	relayDenyCacheTTL  = 30 * time.Second
	relayReviewTimeout = 10 * time.Second
	// relayShutdownTimeout is how long requests in flight may take to end
	// once the relay is asked to stop.
	relayShutdownTimeout = 5 * time.Second
)

// NewUkpdRelayOptions returns the defaults.
func NewUkpdRelayOptions() *UkpdRelayOptions {
	o := &UkpdRelayOptions{
		SecureServing:        genericoptions.NewSecureServingOptions(),
		UkpdURL:              ukpdrelay.DefaultUpstream,
		UkpdRequestTimeout:   ukpdrelay.DefaultTimeout,
		UkpdMaxResponseBytes: ukpd.DefaultMaxResponseBytes,
		Logs:                 logsapi.NewLoggingConfiguration(),
	}
	o.SecureServing.BindPort = UkpdRelayPort
	// Serving is the relay's only work: --secure-port 0 cannot turn it off.
	o.SecureServing.Required = true
	// The pair comes from files only (Validate): a generated one could be
	// verified by no client.
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = ""
	return o
}

// Flags returns the flags, grouped for --help.
func (o *UkpdRelayOptions) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("relay")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this host's kraftlet node (kraftlet-<host>). A reader must be allowed to get its nodes/stats, as it would be to read a kubelet's /stats. Required.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster whose TokenReviews and SubjectAccessReviews admit readers; in-cluster configuration when empty.")

	fs = fss.FlagSet("ukpd")
	fs.StringVar(&o.UkpdURL, "ukpd-url", o.UkpdURL, "Base URL of ukpd on this host: http or https to a loopback address, so that ukpd's token never leaves the host.")
	fs.StringVar(&o.UkpdTokenFile, "ukpd-token-file", o.UkpdTokenFile, "File with ukpd's bearer token, sent to --ukpd-url only; re-read when it changes. Required.")
	fs.StringVar(&o.UkpdCAFile, "ukpd-certificate-authority", o.UkpdCAFile, "CA file to verify an https --ukpd-url with; the system roots when empty.")
	fs.DurationVar(&o.UkpdRequestTimeout, "ukpd-request-timeout", o.UkpdRequestTimeout, "Longest wait for one answer of ukpd; then 504.")
	fs.Int64Var(&o.UkpdMaxResponseBytes, "ukpd-max-response-bytes", o.UkpdMaxResponseBytes, "Largest answer of ukpd relayed; a larger one is 502. The server's ukpd client keeps the same cap by default.")

	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Validate returns every problem with the flags.
func (o *UkpdRelayOptions) Validate() []error {
	errs := o.SecureServing.Validate()
	if ck := o.SecureServing.ServerCert.CertKey; ck.CertFile == "" || ck.KeyFile == "" {
		errs = append(errs, fmt.Errorf("--tls-cert-file and --tls-private-key-file are required: the server verifies the relay's certificate before it sends its token"))
	}
	if _, err := ukpdrelay.ParseUpstream(o.UkpdURL); err != nil {
		errs = append(errs, fmt.Errorf("--ukpd-url: %w", err))
	}
	if o.UkpdTokenFile == "" {
		errs = append(errs, fmt.Errorf("--ukpd-token-file is required"))
	}
	if o.NodeName == "" {
		errs = append(errs, fmt.Errorf("--node-name is required: the kraftlet node of this host"))
	} else if msgs := validation.IsDNS1123Subdomain(o.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--node-name %q is not a node name: %s", o.NodeName, strings.Join(msgs, "; ")))
	}
	if o.UkpdRequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--ukpd-request-timeout must be positive, got %s", o.UkpdRequestTimeout))
	}
	if o.UkpdMaxResponseBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("--ukpd-max-response-bytes must be at least 1024, got %d", o.UkpdMaxResponseBytes))
	}
	return errs
}

// Run builds the relay and serves it until ctx is done.
func (o *UkpdRelayOptions) Run(ctx context.Context) error {
	restCfg, err := (&Options{Kubeconfig: o.Kubeconfig}).restConfig()
	if err != nil {
		return err
	}
	restCfg.UserAgent = userAgent + "-ukpd-relay"
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	relay, err := o.relay(kube)
	if err != nil {
		return err
	}
	return o.serve(ctx, relay)
}

// relay builds the relay, admitting readers as the kubelet does: bearer
// tokens through TokenReview, the node's stats through
// SubjectAccessReview, both cached, and no anonymous reader.
func (o *UkpdRelayOptions) relay(kube kubernetes.Interface) (*ukpdrelay.Relay, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: relayReviewTimeout,
		WebhookRetryBackoff:      genericoptions.DefaultAuthWebhookRetryBackoff(),
		CacheTTL:                 relayTokenCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             relayAllowCacheTTL,
		DenyCacheTTL:              relayDenyCacheTTL,
		WebhookRetryBackoff:       genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	return ukpdrelay.New(ukpdrelay.Config{
		Upstream:         o.UkpdURL,
		UpstreamCAFile:   o.UkpdCAFile,
		TokenFile:        o.UkpdTokenFile,
		NodeName:         o.NodeName,
		Authenticator:    authn,
		Authorizer:       authz,
		MaxResponseBytes: o.UkpdMaxResponseBytes,
		Timeout:          o.UkpdRequestTimeout,
	})
}

// serve serves handler over TLS until ctx is done, as the server serves:
// k8s.io/apiserver's secure serving, which reloads the pair when its files
// change. It waits for the files first, as the server does: mounted from a
// Secret, they may not be there yet.
func (o *UkpdRelayOptions) serve(ctx context.Context, handler http.Handler) error {
	ck := o.SecureServing.ServerCert.CertKey
	if err := waitForFiles(ctx, ck.CertFile, ck.KeyFile); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var serving *genericapiserver.SecureServingInfo
	if err := o.SecureServing.ApplyTo(&serving); err != nil {
		return fmt.Errorf("secure serving: %w", err)
	}
	stopped, _, err := serving.Serve(handler, relayShutdownTimeout, ctx.Done())
	if err != nil {
		return fmt.Errorf("secure serving: %w", err)
	}
	<-stopped
	return nil
}
