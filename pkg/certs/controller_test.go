package certs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRenewalTiming(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := newRig(clk, newKube(), nil)
	r.sync(t)
	first := secret(t, r.kube, servingName)
	leaf, err := parseCert(first.Data[KeyServingCert])
	must(t, err)
	// Valid 30m from t0, backdated 3m: a third of 33m remains at t0+19m.
	wantRenew := t0.Add(19 * time.Minute)
	if got := renewAt(leaf); !got.Equal(wantRenew) {
		t.Fatalf("renewal planned at %s, want %s", got, wantRenew)
	}
	for _, b := range apiServiceV1 {
		if err := verifies(first.Data[KeyServingCert], caBundleOf(t, r.dyn, b), clk.Now()); err != nil {
			t.Fatalf("%s: the first pair does not verify against the caBundle: %v", b, err)
		}
	}

	clk.SetTime(wantRenew.Add(-time.Second))
	if wait := r.sync(t); wait != time.Second {
		t.Errorf("a second before renewal the next sync is due in %s, want 1s", wait)
	}
	if got := secret(t, r.kube, servingName).Data[KeyServingCert]; !bytes.Equal(got, first.Data[KeyServingCert]) {
		t.Fatal("serving pair replaced before a third of its life remained")
	}
	clk.SetTime(wantRenew)
	r.sync(t)
	renewed := secret(t, r.kube, servingName)
	if bytes.Equal(renewed.Data[KeyServingCert], first.Data[KeyServingCert]) {
		t.Fatal("serving pair not replaced when a third of its life remained")
	}
	if !bytes.Equal(renewed.Data[KeyServingCA], first.Data[KeyServingCA]) {
		t.Error("a renewal under the same CA changed the trusted CAs")
	}
	// Nothing is due: a sync writes nothing.
	before := r.writes()
	clk.Step(time.Minute)
	r.sync(t)
	if n := r.writes() - before; n != 0 {
		t.Errorf("a sync with nothing due wrote %d times", n)
	}
}

// history holds the versions of one value, by the time they were written.
type history struct {
	at   []time.Time
	data [][]byte
}

func (h *history) record(at time.Time, data []byte) {
	if n := len(h.data); n > 0 && bytes.Equal(h.data[n-1], data) {
		return
	}
	h.at = append(h.at, at)
	h.data = append(h.data, data)
}

// asOf returns the version a reader that lags by d sees at now: the latest
// written no later than now-d.
func (h *history) asOf(now time.Time, d time.Duration) []byte {
	var out []byte
	for i, at := range h.at {
		if !at.After(now.Add(-d)) {
			out = h.data[i]
		}
	}
	return out
}

type simulation struct {
	writers []*rig
	// replicaLags are how late each serving replica loads the serving
	// Secret; aggregatorLag is how late the aggregator verifies with a
	// caBundle.
	replicaLags                []time.Duration
	aggregatorLag, step, total time.Duration
	between                    func(now time.Time) // runs after every step, at the first writer's time
}

type simResult struct {
	cas, serials map[string]bool
	checks       int
}

// run steps every writer's clock together, syncs each writer when it is
// due, and checks after every step that the pair each replica serves
// verifies against the caBundle the aggregator uses for each APIService.
func (s simulation) run(t *testing.T) simResult {
	t.Helper()
	ctx := context.Background()
	kube, dyn := s.writers[0].kube, s.writers[0].dyn
	serving := &history{}
	bundles := map[string]*history{apiServiceV1[0]: {}, apiServiceV1[1]: {}}
	res := simResult{cas: map[string]bool{}, serials: map[string]bool{}}
	due := make([]time.Time, len(s.writers))
	for elapsed := time.Duration(0); elapsed <= s.total; elapsed += s.step {
		for i, w := range s.writers {
			if elapsed > 0 {
				w.clk.Step(s.step)
			}
			if !w.clk.Now().Before(due[i]) {
				due[i] = w.clk.Now().Add(w.sync(t))
			}
		}
		now := s.writers[0].clk.Now()
		if s.between != nil {
			s.between(now)
		}
		sec, err := kube.CoreV1().Secrets(testNS).Get(ctx, servingName, metav1.GetOptions{})
		if err == nil && len(sec.Data[KeyServingCert]) > 0 {
			serving.record(now, sec.Data[KeyServingCert])
			leaf, _ := parseCert(sec.Data[KeyServingCert])
			res.serials[leaf.SerialNumber.String()] = true
			for _, ca := range ParseCerts(sec.Data[KeyServingCA]) {
				if signedBy(leaf, ca) {
					res.cas[ca.SerialNumber.String()] = true
				}
			}
		}
		for n, h := range bundles {
			h.record(now, caBundleOf(t, dyn, n))
		}
		for r, lag := range s.replicaLags {
			cert := serving.asOf(now, lag)
			if cert == nil {
				continue
			}
			for n, h := range bundles {
				b := h.asOf(now, s.aggregatorLag)
				if b == nil {
					continue // nothing verifies before the first caBundle
				}
				res.checks++
				if err := verifies(cert, b, now); err != nil {
					t.Fatalf("at +%s the aggregator rejects replica %d (lag %s) for %s: %v", elapsed, r, lag, n, err)
				}
			}
		}
	}
	return res
}

// TestRotationNeverRejects runs seven hours of a 3h CA and 30m pairs: with
// two replicas, one loading each change at once and one just within the
// propagation bound; and with an aggregator as late. No replica is ever
// rejected, through every renewal and every CA rotation.
func TestRotationNeverRejects(t *testing.T) {
	step := 30 * time.Second
	late := testPolicy.Propagation - step
	for _, tc := range []struct {
		name          string
		replicaLags   []time.Duration
		aggregatorLag time.Duration
	}{
		{"late replica", []time.Duration{0, late}, 0},
		{"late aggregator", []time.Duration{0}, late},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(clocktesting.NewFakeClock(t0), newKube(), nil)
			res := simulation{writers: []*rig{r}, replicaLags: tc.replicaLags, aggregatorLag: tc.aggregatorLag, step: step, total: 7 * time.Hour}.run(t)
			// A CA lasts 3h and is replaced when 1h remains: CAs from 0h,
			// 2h, 4h and 6h. Pairs are replaced every 19 minutes or sooner.
			if len(res.cas) != 4 {
				t.Errorf("serving pairs were signed by %d CAs in 7h, want 4", len(res.cas))
			}
			if len(res.serials) < 7*60/19 {
				t.Errorf("%d serving pairs in 7h, want at least %d", len(res.serials), 7*60/19)
			}
			t.Logf("%d checks, %d CAs, %d serving pairs", res.checks, len(res.cas), len(res.serials))
		})
	}
}

// TestTwoWritersConverge runs two controllers whose clocks are 20s apart
// against the same Secrets and APIServices, as after a leader change with
// a stale view: they never make a replica rejected, and once nothing is
// due they stop writing.
func TestTwoWritersConverge(t *testing.T) {
	a := newRig(clocktesting.NewFakeClock(t0), newKube(), nil)
	b := newRig(clocktesting.NewFakeClock(t0.Add(-20*time.Second)), a.kube, a.dyn)
	step := 30 * time.Second
	// Skew between writers shortens the time a retired CA is kept by
	// twice the skew.
	lag := testPolicy.Propagation - step - 40*time.Second
	res := simulation{writers: []*rig{a, b}, replicaLags: []time.Duration{0, lag}, step: step, total: 5 * time.Hour}.run(t)
	if len(res.cas) != 3 {
		t.Errorf("serving pairs were signed by %d CAs in 5h, want 3", len(res.cas))
	}

	// Quiet: a minute after a sync with nothing due, neither writes.
	a.sync(t)
	b.sync(t)
	before := a.writes()
	for range 3 {
		a.clk.Step(time.Second)
		b.clk.Step(time.Second)
		a.sync(t)
		b.sync(t)
	}
	if n := a.writes() - before; n != 0 {
		t.Errorf("two writers with nothing due wrote %d times in 3 rounds", n)
	}
}

// TestLostCA deletes the CA Secret's content while a pair of its CA is
// served, and later makes its key unparsable: the new CA is trusted before
// it signs, and the old one stays until the new pair reached every replica.
func TestLostCA(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(data map[string][]byte)
	}{
		{"deleted", func(data map[string][]byte) { clear(data) }},
		{"unparsable key", func(data map[string][]byte) {
			data[KeyCAKey] = []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(clocktesting.NewFakeClock(t0), newKube(), nil)
			step, lost := 30*time.Second, false
			res := simulation{
				writers: []*rig{r}, replicaLags: []time.Duration{0, testPolicy.Propagation - step}, step: step, total: time.Hour,
				between: func(now time.Time) {
					if lost || now.Before(t0.Add(10*time.Minute)) {
						return
					}
					lost = true
					s := secret(t, r.kube, caName)
					tc.lose(s.Data)
					s.Annotations = nil
					_, err := r.kube.CoreV1().Secrets(testNS).Update(context.Background(), s, metav1.UpdateOptions{})
					must(t, err)
				},
			}.run(t)
			if len(res.cas) != 2 {
				t.Errorf("serving pairs were signed by %d CAs, want 2 (the lost one, then the new one)", len(res.cas))
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Policy
		want int
	}{
		{"defaults", Policy{DNSNames: []string{"a"}, CAValidity: 10 * 365 * 24 * time.Hour, ServingValidity: 365 * 24 * time.Hour, Propagation: 5 * time.Minute}, 0},
		{"test", testPolicy, 0},
		{"no names", Policy{CAValidity: time.Hour, ServingValidity: 15 * time.Minute, Propagation: time.Minute}, 1},
		{"pair too short", Policy{DNSNames: []string{"a"}, CAValidity: time.Hour, ServingValidity: 2 * time.Minute, Propagation: time.Minute}, 1},
		{"pair longer than a third of the CA", Policy{DNSNames: []string{"a"}, CAValidity: time.Hour, ServingValidity: 30 * time.Minute, Propagation: time.Minute}, 1},
		{"everything", Policy{CAValidity: time.Minute, ServingValidity: time.Hour, Propagation: time.Minute}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := tc.p.Validate(); len(errs) != tc.want {
				t.Errorf("got %d errors, want %d: %v", len(errs), tc.want, errs)
			}
		})
	}
}

func TestPlanIdempotent(t *testing.T) {
	s, _, err := Plan(State{}, t0, testPolicy, false)
	must(t, err)
	again, did, err := Plan(s, t0, testPolicy, true)
	must(t, err)
	if len(did) != 0 || !bytes.Equal(again.Bundle(), s.Bundle()) || !bytes.Equal(again.Serving.CertPEM, s.Serving.CertPEM) {
		t.Errorf("planning a planned state again changed it: %v", did)
	}
}

// TestTakeOverFromMetricsServer: an APIService left by metrics-server's
// manifests (insecureSkipTLSVerify, which the API server refuses beside a
// caBundle) but pointing at our Service gets the caBundle and loses the
// flag in one write; one still pointing at metrics-server is left alone.
func TestTakeOverFromMetricsServer(t *testing.T) {
	metricsServer := ServiceRef{Namespace: testNS, Name: "metrics-server", Port: 443}
	dyn := newDynamic(apiService("v1beta1.metrics.k8s.io", ourService, true), apiService("v1.metrics.k8s.io", metricsServer, true))
	r := newRig(clocktesting.NewFakeClock(t0), newKube(), dyn)
	r.sync(t)
	if _, found, _ := unstructured.NestedBool(getAPIService(t, dyn, "v1beta1.metrics.k8s.io").Object, "spec", "insecureSkipTLSVerify"); found {
		t.Error("insecureSkipTLSVerify still set on the APIService that points at our Service")
	}
	if err := verifies(secret(t, r.kube, servingName).Data[KeyServingCert], caBundleOf(t, dyn, "v1beta1.metrics.k8s.io"), t0); err != nil {
		t.Errorf("caBundle does not verify the serving pair: %v", err)
	}
	other := getAPIService(t, dyn, "v1.metrics.k8s.io")
	b, _, _ := unstructured.NestedString(other.Object, "spec", "caBundle")
	if insecure, _, _ := unstructured.NestedBool(other.Object, "spec", "insecureSkipTLSVerify"); b != "" || !insecure {
		t.Errorf("changed an APIService that points at metrics-server: caBundle %q, insecureSkipTLSVerify %v", b, insecure)
	}

	// Then the user applies our manifests: it points at us, and is taken.
	must(t, unstructured.SetNestedField(other.Object, ourService.Name, "spec", "service", "name"))
	_, err := dyn.Resource(APIServiceResource).Update(context.Background(), other, metav1.UpdateOptions{})
	must(t, err)
	r.clk.Step(time.Second)
	r.sync(t)
	if err := verifies(secret(t, r.kube, servingName).Data[KeyServingCert], caBundleOf(t, dyn, "v1.metrics.k8s.io"), t0); err != nil {
		t.Errorf("caBundle does not verify the serving pair once the APIService points at us: %v", err)
	}
}

// TestRecreateDeleted: a deleted APIService is created again once it has
// been missing for RecreateAfter, as the manifests define it, labelled and
// owned so that an uninstall removes it.
func TestRecreateDeleted(t *testing.T) {
	dyn := newDynamic(apiService("v1beta1.metrics.k8s.io", ourService, false))
	r := newRig(clocktesting.NewFakeClock(t0), newKube(), dyn)
	for _, step := range []struct {
		after time.Duration
		why   string
	}{{0, "created at once: an uninstall in progress would be undone"}, {9 * time.Second, "created before RecreateAfter"}} {
		r.clk.Step(step.after)
		r.sync(t) // v1 seen missing
		if _, err := dyn.Resource(APIServiceResource).Get(context.Background(), "v1.metrics.k8s.io", metav1.GetOptions{}); err == nil {
			t.Fatal(step.why)
		}
	}
	r.clk.Step(time.Second)
	r.sync(t)
	got, err := dyn.Resource(APIServiceResource).Get(context.Background(), "v1.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("not created again after RecreateAfter: %v", err)
	}
	spec, _, _ := unstructured.NestedMap(got.Object, "spec")
	delete(spec, "caBundle")
	want := map[string]any{
		"group": "metrics.k8s.io", "version": "v1", "groupPriorityMinimum": int64(100), "versionPriority": int64(200),
		"service": map[string]any{"namespace": testNS, "name": ourService.Name, "port": int64(443)},
	}
	if d := cmp.Diff(want, spec); d != "" {
		t.Errorf("recreated spec (-want +got):\n%s", d)
	}
	if got.GetLabels()["app.kubernetes.io/name"] != "group-metrics-server" || len(got.GetOwnerReferences()) != 1 {
		t.Errorf("recreated APIService lacks the label or the owner: %v %v", got.GetLabels(), got.GetOwnerReferences())
	}
	if err := verifies(secret(t, r.kube, servingName).Data[KeyServingCert], caBundleOf(t, dyn, "v1.metrics.k8s.io"), r.clk.Now()); err != nil {
		t.Errorf("recreated caBundle: %v", err)
	}
}

func TestVersionPriority(t *testing.T) {
	for v, want := range map[string]int64{"v1": 200, "v1beta1": 100, "v1beta2": 200} {
		if got := versionPriority(v); got != want {
			t.Errorf("versionPriority(%s) = %d, want %d", v, got, want)
		}
	}
}
