package promscrape

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

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
	grace       time.Duration
	// decoding holds a slot per body being decoded (decodeSlots).
	decoding chan struct{}

	// mu guards busy: the targets whose scrape overran and still runs.
	mu   sync.Mutex
	busy map[string]bool
	// refused are the refusals logged already, so each is logged once.
	refused map[refusalKey]bool
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
		grace: overrunGrace(cfg), busy: map[string]bool{}, refused: map[refusalKey]bool{},
		decoding: make(chan struct{}, decodeSlots),
	}
}

// decodeSlots bounds the bodies decoded at once, whatever the scrape
// concurrency: decoding is CPU-bound, and the text parser allocates up to
// about 33 bytes per byte of a label-heavy body (docs/benchmarks.md,
// BenchmarkDecodeWorstCase), so the decodes in flight, not the fetches,
// set the source's peak memory: decodeSlots × 33 × maxBytes, 66 MiB at the
// default 1 MiB.
const decodeSlots = 2

// overrunGrace is how long past its timeout a target is waited for, as
// pkg/sources' scraper waits: long enough for a target that honours its
// context to return, short of the next collection when the interval is
// known (else a second).
func overrunGrace(cfg *Config) time.Duration {
	if cfg.Interval.Duration == 0 {
		return time.Second
	}
	return max(min(time.Second, (cfg.Interval.Duration-cfg.Timeout.Duration)/2), 0)
}

// TargetError is a failed target of one tick.
type TargetError struct {
	ID     string
	Reason string
	Err    error
}

func (e TargetError) Error() string { return fmt.Sprintf("scrape %s (%s): %v", e.ID, e.Reason, e.Err) }

// result is what one target's scrape gave.
type result struct {
	samples []Sample
	err     error
}

// Collect scrapes every target under its own timeout, at most Concurrency
// at a time, and returns what they gave: one failing target never loses the
// others, and one that overruns its timeout by the grace is not waited
// for. The errors name each failed target with its reason. Exporters'
// series are admitted only for pods on the exporter's node and where the
// pod's own target gives no sample of the same metric and container (see
// admit); every sample must lie within its metric's bounds.
func (s *Source) Collect(ctx context.Context) (Batch, []TargetError) {
	pods := s.pods.ListPods()
	targets, terrs := s.cfg.Targets(pods)
	s.noteRefusals(terrs)
	results := s.scrapeAll(ctx, targets)
	adm := newAdmission(pods, targets, results)
	for i := range targets {
		if r := &results[i]; r.err == nil || errors.Is(r.err, errSkipped) {
			r.samples = adm.admit(&targets[i], s.cfg.Metrics, r.samples)
		}
	}
	s.budget(targets, results)
	var (
		all    []Sample
		failed []TargetError
		kept   = map[string]int{KindPod: 0, KindExporter: 0}
	)
	for i := range targets {
		t, r := &targets[i], results[i]
		if r.err != nil && !errors.Is(r.err, errSkipped) {
			reason := sources.Reason(r.err)
			targetFailures.WithLabelValues(t.Kind, reason).Inc()
			failed = append(failed, TargetError{ID: t.ID, Reason: reason, Err: r.err})
			continue
		}
		if r.err != nil {
			partialTargets.WithLabelValues(t.Kind).Inc()
			klog.V(2).InfoS("Scrape left out series", "target", t.ID, "err", r.err)
		}
		kept[t.Kind] += len(r.samples)
		all = append(all, s.rates.Apply(t.incarnation(), s.cfg.Metrics, r.samples)...)
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

// budget holds the collection to limits.pointsPerCollection. When the
// targets' samples add up to more, the targets with the fewest samples are
// kept first, so that one or a few targets sending the most cannot starve
// the many that send a few; the rest fail as too_large.
func (s *Source) budget(targets []Target, results []result) {
	order := make([]int, 0, len(results))
	for i, r := range results {
		if r.err == nil || errors.Is(r.err, errSkipped) {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return len(results[order[a]].samples) < len(results[order[b]].samples) })
	points, limit := 0, s.cfg.Limits.PointsPerCollection
	for _, i := range order {
		r := &results[i]
		if points+len(r.samples) <= limit {
			points += len(r.samples)
			continue
		}
		r.err = sources.WithReason(sources.ReasonTooLarge, fmt.Errorf("scrape %s: its %d samples would pass the %d of one collection (limits.pointsPerCollection)",
			targets[i].ID, len(r.samples), limit))
		r.samples = nil
	}
}

// scrapeAll scrapes targets, at most Concurrency at a time, and returns
// their results in the targets' order.
func (s *Source) scrapeAll(ctx context.Context, targets []Target) []result {
	results := make([]result, len(targets))
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for i := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = s.scrapeBounded(ctx, &targets[i])
		}()
	}
	wg.Wait()
	return results
}

// scrapeBounded scrapes one target and returns when the scrape has ended
// or has overrun its timeout by the grace, whichever comes first. A scrape
// that overruns (one still decoding when its context ends) goes on in its
// own goroutine, whose result is dropped; until it ends the target is
// skipped as busy, so a target never holds more than one goroutine. The
// timer runs on real time, as the scrape's context deadline does.
func (s *Source) scrapeBounded(ctx context.Context, t *Target) result {
	s.mu.Lock()
	if s.busy[t.ID] {
		s.mu.Unlock()
		return result{err: sources.WithReason(sources.ReasonTimeout, fmt.Errorf("scrape %s: an earlier scrape overran and still runs", t.ID))}
	}
	s.busy[t.ID] = true
	s.mu.Unlock()
	done := make(chan result, 1)
	go func() {
		samples, err := s.scrapeTarget(ctx, t)
		// The target is free again before its result is handed over, so
		// the next collection never finds a finished scrape still busy.
		s.mu.Lock()
		delete(s.busy, t.ID)
		s.mu.Unlock()
		done <- result{samples, err}
	}()
	timer := time.NewTimer(s.cfg.Timeout.Duration + s.grace)
	defer timer.Stop()
	select {
	case r := <-done:
		return r
	case <-timer.C:
		overruns.WithLabelValues(t.Kind).Inc()
		klog.InfoS("Pod endpoint overran its timeout; not waiting for it", "target", t.ID, "timeout", s.cfg.Timeout.Duration)
		return result{err: sources.WithReason(sources.ReasonTimeout, fmt.Errorf("scrape %s: overran its timeout %s by %s", t.ID, s.cfg.Timeout.Duration, s.grace))}
	case <-ctx.Done():
		return result{err: sources.WithReason(sources.ReasonTimeout, fmt.Errorf("scrape %s: %w", t.ID, ctx.Err()))}
	}
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
	select {
	case s.decoding <- struct{}{}:
	case <-ctx.Done():
		return nil, sources.WithReason(sources.ReasonTimeout, fmt.Errorf("decode %s: waiting for a decode slot: %w", t.ID, ctx.Err()))
	}
	samples, err := s.cfg.decode(ctx, body, t, s.allow, s.clock.Now())
	<-s.decoding
	var re *sources.ReasonError
	switch {
	case err == nil || errors.Is(err, errSkipped):
		return samples, err
	case errors.As(err, &re):
		// A limit passed or the context ended: its reason stands.
		return nil, fmt.Errorf("decode %s: %w", t.ID, err)
	}
	return nil, sources.WithReason(sources.ReasonDecode, fmt.Errorf("decode %s: %w", t.ID, err))
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
		return nil, sources.WithReason(sources.ReasonHTTPStatus, fmt.Errorf("GET %s: %s", url, statusLine(resp)))
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

// maxStatusBytes bounds the status text kept of a failed response: the
// endpoint chooses it, and it goes into errors and logs.
const maxStatusBytes = 128

// statusLine is the response's status, cut to maxStatusBytes and quoted so
// no control character of the endpoint's reaches a log.
func statusLine(resp *http.Response) string {
	st := resp.Status
	if len(st) > maxStatusBytes {
		st = strings.ToValidUTF8(st[:maxStatusBytes], "") + "..."
	}
	return strconv.Quote(st)
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
