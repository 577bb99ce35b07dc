package certs

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	Secrets corev1client.SecretsGetter
	// Namespace holds CASecret and ServingSecret.
	Namespace     string
	CASecret      string
	ServingSecret string
	// APIServices keeps the caBundle of the managed APIServices.
	APIServices *APIServices
	Policy      Policy
	// SyncPeriod is the longest time between two syncs.
	SyncPeriod time.Duration
	Clock      clock.WithTicker
	// Health, when set, learns of every sync for the probes.
	Health *Health
}

// Controller keeps the CA, the serving pair and the caBundles (package doc).
// One runs at a time (leader election); Sync is safe to call from one
// goroutine only.
type Controller struct {
	cfg ControllerConfig
	// problems are the last problems logged, so each is logged once.
	problems string
}

// NewController returns a controller; nothing runs until Run or Sync.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Controller{cfg: cfg}
}

// Run syncs until ctx is done: at every planned change and at least every
// SyncPeriod, and again soon after a failed sync.
func (c *Controller) Run(ctx context.Context) {
	for {
		wait, err := c.Sync(ctx)
		if err != nil {
			klog.ErrorS(err, "Certificate sync failed; retrying")
			wait = min(wait, c.cfg.SyncPeriod/5)
		}
		t := c.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// Sync brings the Secrets and the APIServices one step closer to the
// policy, and returns how long until the next sync is due. Its outcome is
// counted in the controller's self-metrics (RegisterMetrics); an error's
// kind is FailureKind(err).
func (c *Controller) Sync(ctx context.Context) (time.Duration, error) {
	now := c.cfg.Clock.Now()
	wait, next, err := c.sync(ctx, now)
	recordSync(err, next, now)
	if c.cfg.Health != nil {
		c.cfg.Health.synced(err)
	}
	return wait, err
}

func (c *Controller) sync(ctx context.Context, now time.Time) (time.Duration, State, error) {
	secrets := c.cfg.Secrets.Secrets(c.cfg.Namespace)
	caSecret, err := c.get(ctx, secrets, c.cfg.CASecret)
	if err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailureReadSecret, err)
	}
	servingSecret, err := c.get(ctx, secrets, c.cfg.ServingSecret)
	if err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailureReadSecret, err)
	}
	state, problems := ReadState(caSecret, servingSecret)
	if p := fmt.Sprint(problems); len(problems) > 0 && p != c.problems {
		klog.InfoS("Replacing what does not parse in the certificate Secrets", "problems", problems)
		c.problems = p
	}

	// A CA signs only once every APIService trusts it: whether they carry
	// the bundle of the stored state, written by the last sync.
	trusted, err := c.cfg.APIServices.Holds(ctx, state.Bundle())
	if err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailureReadAPIService, err)
	}
	next, did, err := Plan(state, now, c.cfg.Policy, trusted)
	if err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailurePlan, err)
	}
	for _, d := range did {
		klog.InfoS("Serving certificate", "change", d)
	}
	// The CA first: a published pair's CA must never exist only in memory.
	caData, caAnnotations := next.CASecret()
	if err := c.write(ctx, secrets, caSecret, c.cfg.CASecret, caData, caAnnotations); err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailureWriteSecret, err)
	}
	if err := c.write(ctx, secrets, servingSecret, c.cfg.ServingSecret, next.ServingSecret(), nil); err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailureWriteSecret, err)
	}
	// The caBundle last, once the Secrets hold what it trusts.
	if err := c.cfg.APIServices.Sync(ctx, next.Bundle(), now); err != nil {
		return c.cfg.SyncPeriod, State{}, failed(FailureWriteCABundle, err)
	}

	wait := c.cfg.SyncPeriod
	if at := next.NextChange(now, c.cfg.Policy); !at.IsZero() && at.Sub(now) < wait {
		wait = at.Sub(now)
	}
	return wait, next, nil
}

func (c *Controller) get(ctx context.Context, secrets corev1client.SecretInterface, name string) (*corev1.Secret, error) {
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s/%s: %w", c.cfg.Namespace, name, err)
	}
	return s, nil
}

// write stores data (and the planner's annotations, when not nil) in the
// Secret, if they differ. An absent Secret is created; the shipped
// manifests create both Secrets empty, so the controller needs no right to
// create Secrets and a missing one is reported with what to do.
func (c *Controller) write(ctx context.Context, secrets corev1client.SecretInterface, cur *corev1.Secret, name string, data map[string][]byte, annotations map[string]string) error {
	if cur == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.cfg.Namespace, Annotations: annotations},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("secret %s/%s is missing and could not be created (apply the manifests again): %w", c.cfg.Namespace, name, err)
		}
		klog.InfoS("Created secret", "secret", klog.KRef(c.cfg.Namespace, name))
		return nil
	}
	same := maps.EqualFunc(cur.Data, data, bytes.Equal)
	if annotations != nil {
		same = same && sameOwnAnnotations(cur.Annotations, annotations)
	}
	if same {
		return nil
	}
	s := cur.DeepCopy()
	s.Data = data
	if annotations != nil {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for _, k := range []string{AnnotationNextTrustedSince, AnnotationPreviousUntil} {
			delete(s.Annotations, k)
		}
		maps.Copy(s.Annotations, annotations)
	}
	// An update carries the resourceVersion read: a writer with a stale
	// view gets a conflict, and plans again on what it reads next.
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update secret %s/%s: %w", c.cfg.Namespace, name, err)
	}
	klog.V(2).InfoS("Updated secret", "secret", klog.KObj(s))
	return nil
}

func sameOwnAnnotations(cur, want map[string]string) bool {
	for _, k := range []string{AnnotationNextTrustedSince, AnnotationPreviousUntil} {
		if cur[k] != want[k] {
			return false
		}
	}
	return true
}
