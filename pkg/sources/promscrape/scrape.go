package promscrape

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// acceptHeader asks for the text format, which is what the parser reads.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// SourceName is the source's name in the scraper's self-metrics, health
// and the store.
const SourceName = "endpoints"

// Source is the pod-endpoint source: a sources.Source whose targets are the
// pods that opt in and the node exporters, scraped by the one scraper with
// every other target. Their batches carry named series only.
type Source struct {
	cfg    *Config
	pods   PodLister
	client *http.Client
	clock  clock.PassiveClock
	allow  allowed
	// decoding holds a slot per body being decoded (decodeSlots).
	decoding chan struct{}

	mu sync.Mutex
	// refused are the refusals logged already, so each is logged once.
	refused map[refusalKey]bool
	// own is, per pod with its own target, the metrics and containers its
	// last scrape gave: an exporter's sample of one of them is dropped.
	own map[podKey]map[ownKey]bool
}

var _ sources.Source = &Source{}

// Options are a Source's collaborators.
type Options struct {
	// Client makes the requests; its TLS settings apply to https targets.
	// Per-target timeouts come from the Config, not from the client, and
	// redirects are never followed. No credential is sent to a target but
	// an endpoint picker's own token (EndpointPicker.TokenFile), to that
	// picker's pods.
	Client *http.Client
	Clock  clock.PassiveClock
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
	return &Source{
		cfg: cfg, pods: pods, client: &client, clock: o.Clock, allow: cfg.allowList(),
		refused: map[refusalKey]bool{}, own: map[podKey]map[ownKey]bool{},
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

// Name implements sources.Source.
func (s *Source) Name() string { return SourceName }

// Targets implements sources.Source: the targets of the pods running now,
// sorted by ID, sharing this tick's budget of points
// (limits.pointsPerCollection). Pods refused as targets are counted and
// logged once.
func (s *Source) Targets() ([]sources.Target, error) {
	pods := s.pods.ListPods()
	targets, errs := s.cfg.Targets(pods)
	s.noteRefusals(errs)
	byKey := make(map[podKey]*Pod, len(pods))
	for i := range pods {
		byKey[podKey{pods[i].Namespace, pods[i].Name}] = &pods[i]
	}
	b := newBudget(s.cfg.Limits.PointsPerCollection, len(targets))
	out := make([]sources.Target, len(targets))
	withOwn := map[podKey]bool{}
	for i := range targets {
		out[i] = &target{src: s, Target: targets[i], pods: byKey, budget: b}
		if p := targets[i].Pod; p != nil {
			withOwn[podKey{p.Namespace, p.Name}] = true
		}
	}
	s.mu.Lock()
	for k := range s.own {
		if !withOwn[k] {
			delete(s.own, k)
		}
	}
	s.mu.Unlock()
	return out, nil
}

type podKey struct{ namespace, name string }

// target is one Target of one tick, as the scraper scrapes it.
type target struct {
	Target
	src *Source
	// pods are the tick's pods by namespace and name, to attribute an
	// exporter's series.
	pods   map[podKey]*Pod
	budget *budget
}

func (t *target) ID() string { return t.Target.ID }

// Nodes is empty: the target's batch holds named series, owned by the
// target, and no node's usage.
func (t *target) Nodes() []string { return nil }

// Scrape implements sources.Target: fetch and decode under the
// configuration's timeout, admit (admit.go), then take the samples from the
// tick's budget.
func (t *target) Scrape(ctx context.Context) (*sources.Batch, error) {
	samples, err := t.src.scrapeTarget(ctx, &t.Target)
	if err != nil && !errors.Is(err, errSkipped) {
		return nil, err
	}
	samples = t.src.admit(&t.Target, t.pods, samples)
	if !t.budget.take(len(samples)) {
		return nil, sources.WithReason(sources.ReasonTooLarge, fmt.Errorf("scrape %s: its %d samples do not fit in the %d of one collection (limits.pointsPerCollection)",
			t.Target.ID, len(samples), t.budget.limit))
	}
	if t.Pod != nil {
		t.src.setOwn(t.Pod, samples)
	}
	if err != nil {
		klog.V(2).InfoS("Scrape left out series", "target", t.Target.ID, "err", err)
	}
	series := t.series(samples)
	if t.Picker != nil {
		// The pool is spoken for even when the picker has no series of it
		// (no request queued since it started): its sums are then 0.
		a := t.attribution()
		series = append(series, sources.SeriesPoint{Namespace: a.namespace, Pod: a.pod, Timestamp: t.src.clock.Now()})
	}
	return &sources.Batch{Series: series}, err
}

// series are samples as the store takes them, each with the UID of the pod
// it is credited to.
func (t *target) series(samples []Sample) []sources.SeriesPoint {
	out := make([]sources.SeriesPoint, len(samples))
	for i, sm := range samples {
		m := &t.src.cfg.Metrics[sm.Metric]
		sp := sources.SeriesPoint{
			Namespace: sm.Namespace, Pod: sm.Pod, Container: sm.Container,
			Metric: m.Name, Series: sm.Series,
			Value: sm.Value, Counter: m.Type != Gauge, Timestamp: sm.Timestamp,
			Exporter: t.Kind == KindExporter,
		}
		if p := t.pods[podKey{sm.Namespace, sm.Pod}]; p != nil {
			sp.UID = p.UID
		}
		out[i] = sp
	}
	return out
}

// budget holds a tick to limits.pointsPerCollection, so that one or a few
// targets sending the most cannot starve the many that send a few: each
// target is sure of its share of the limit (limit / targets); a target
// above its share is kept only while the points taken, with the shares of
// the targets still to come, leave room for it, else it fails as
// too_large.
type budget struct {
	mu                            sync.Mutex
	limit, share, taken, reserved int
}

func newBudget(limit, targets int) *budget {
	share := limit
	if targets > 0 {
		share = limit / targets
	}
	return &budget{limit: limit, share: share, reserved: share * targets}
}

// take accounts for a target's n points and says whether they fit.
func (b *budget) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved -= b.share
	if n > b.share && b.taken+n+b.reserved > b.limit {
		return false
	}
	b.taken += n
	return true
}

// scrapeTarget fetches and decodes one target. Its error carries a
// sources.Reason; a decode that left out series returns the samples with an
// error wrapping errSkipped.
func (s *Source) scrapeTarget(ctx context.Context, t *Target) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout.Duration)
	defer cancel()
	body, err := s.fetch(ctx, t)
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

func (s *Source) fetch(ctx context.Context, t *Target) ([]byte, error) {
	url := t.URL
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, sources.WithReason(sources.ReasonOther, err)
	}
	req.Header.Set("Accept", acceptHeader)
	if t.Picker != nil && t.Picker.TokenFile != "" {
		token, err := readToken(t.Picker.TokenFile)
		if err != nil {
			return nil, sources.WithReason(sources.ReasonOther, err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
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

// maxTokenBytes bounds a token file: a ServiceAccount token is about a
// kilobyte.
const maxTokenBytes = 16 << 10

// readToken reads a bearer token file afresh, as the kubelet rewrites a
// projected token before it expires.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("endpoint picker token: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := sources.ReadCapped(f, maxTokenBytes)
	if err != nil {
		return "", fmt.Errorf("endpoint picker token %s: %w", path, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return "", fmt.Errorf("endpoint picker token %s: empty or more than one line", path)
	}
	return token, nil
}

// maxStatusBytes bounds the status text kept of a failed response: the
// endpoint chooses it, and it goes into errors and logs.
const maxStatusBytes = 128

// statusLine is the response's status, cut to maxStatusBytes and quoted so
// no control character of the endpoint's reaches a log.
func statusLine(resp *http.Response) string {
	return strconv.Quote(sources.Clip(resp.Status, maxStatusBytes))
}
