package promscrape

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// acceptHeader asks for the text format, which is what the parser reads.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Source scrapes pod endpoints and node exporters. Collect is called once
// per tick from one goroutine.
type Source struct {
	cfg         *Config
	pods        PodLister
	client      *http.Client
	clock       clock.PassiveClock
	allow       allowed
	rates       *Rates
	concurrency int
}

// Options are a Source's collaborators.
type Options struct {
	// Client makes the requests; its TLS settings apply to https targets.
	// Per-target timeouts come from the Config, not from the client, and
	// redirects are never followed. No credentials are sent to targets.
	Client *http.Client
	Clock  clock.PassiveClock
	// Concurrency bounds the scrapes in flight; 16 when zero.
	Concurrency int
}

// NewSource returns a source for a Config returned by Parse.
func NewSource(cfg *Config, pods PodLister, o Options) *Source {
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	// A pod's endpoint must not send the server elsewhere: a redirect is
	// answered as its 3xx status (http_status), never followed.
	client := *o.Client
	client.CheckRedirect = sources.NoRedirects
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	return &Source{
		cfg: cfg, pods: pods, client: &client, clock: o.Clock,
		allow: cfg.allowList(), rates: NewRates(), concurrency: o.Concurrency,
	}
}

// TargetError is a failed target of one tick.
type TargetError struct {
	ID     string
	Reason string
	Err    error
}

func (e TargetError) Error() string { return fmt.Sprintf("scrape %s (%s): %v", e.ID, e.Reason, e.Err) }

// Collect scrapes every target under its own timeout, at most Concurrency
// at a time, and returns what they gave: one failing target never loses the
// others. The errors name each failed target with its reason.
func (s *Source) Collect(ctx context.Context) (Batch, []TargetError) {
	pods := s.pods.ListPods()
	targets, terrs := s.cfg.Targets(pods)
	for _, err := range terrs {
		klog.V(2).InfoS("Pod asks to be scraped but cannot be", "err", err)
	}
	results := make([][]Sample, len(targets))
	errs := make([]error, len(targets))
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for i := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], errs[i] = s.scrapeTarget(ctx, &targets[i])
		}()
	}
	wg.Wait()
	var (
		all    []Sample
		failed []TargetError
		kept   = map[string]int{KindPod: 0, KindExporter: 0}
	)
	for i := range targets {
		t := &targets[i]
		if errs[i] != nil && !errors.Is(errs[i], errSkipped) {
			reason := sources.Reason(errs[i])
			targetFailures.WithLabelValues(t.Kind, reason).Inc()
			failed = append(failed, TargetError{ID: t.ID, Reason: reason, Err: errs[i]})
			continue
		}
		if errs[i] != nil {
			partialTargets.WithLabelValues(t.Kind).Inc()
			klog.V(2).InfoS("Scrape left out series", "target", t.ID, "err", errs[i])
		}
		kept[t.Kind] += len(results[i])
		all = append(all, s.rates.Apply(t.incarnation(), s.cfg.Metrics, results[i])...)
	}
	all = dedupe(all)
	s.rates.Sweep()
	for k, n := range kept {
		seriesKept.WithLabelValues(k).Set(float64(n))
	}
	b := Collate(s.cfg.Metrics, all)
	withUIDs(b, pods)
	return b, failed
}

// withUIDs gives each pod of b its UID from pods, the list the collection
// started from.
func withUIDs(b Batch, pods []Pod) {
	uids := make(map[podKey]string, len(pods))
	for i := range pods {
		uids[podKey{pods[i].Namespace, pods[i].Name}] = pods[i].UID
	}
	for i := range b.Pods {
		b.Pods[i].UID = uids[podKey{b.Pods[i].Namespace, b.Pods[i].Name}]
	}
}

// scrapeTarget fetches and decodes one target. Its error carries a
// sources.Reason; a decode that left out series returns the samples with an
// error wrapping errSkipped.
func (s *Source) scrapeTarget(ctx context.Context, t *Target) ([]Sample, error) {
	start := s.clock.Now()
	defer func() { targetDuration.WithLabelValues(t.Kind).Observe(s.clock.Since(start).Seconds()) }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout.Duration)
	defer cancel()
	body, err := s.fetch(ctx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.ID, err)
	}
	samples, err := s.cfg.decode(body, t, s.allow, s.clock.Now())
	if err != nil && !errors.Is(err, errSkipped) {
		return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode %s: %w", t.ID, err))
	}
	return samples, err
}

func (s *Source) fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, sources.WithReason(sources.ReasonOther, err)
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, sources.WithReason(sources.TransportReason(err), err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, sources.WithReason(sources.ReasonHTTPStatus, fmt.Errorf("GET %s: %s", url, resp.Status))
	}
	body, err := sources.ReadCapped(resp.Body, s.cfg.MaxBytes)
	if err != nil {
		if ctx.Err() != nil {
			return nil, sources.WithReason(sources.ReasonTimeout, fmt.Errorf("read %s: %w", url, ctx.Err()))
		}
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	return body, nil
}

// dedupe keeps one sample per metric, pod, container and series: two
// exporter pods on one node (a DaemonSet rolling) report the same GPUs,
// which must not count twice. Targets are sorted by ID, so the first kept
// is the same on every tick.
func dedupe(samples []Sample) []Sample {
	type key struct {
		metric                       int
		namespace, pod, cont, series string
	}
	seen := make(map[key]struct{}, len(samples))
	out := samples[:0]
	for _, s := range samples {
		k := key{s.Metric, s.Namespace, s.Pod, s.Container, s.Series}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, s)
	}
	return out
}
