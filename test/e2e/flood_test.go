//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/apiserver"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// floodFor is how long the tenant floods the server.
const floodFor = 60 * time.Second

// hpaReadBound is the p99 the HPA's reads keep under the flood. The HPA reads each HPA's metrics once per
// sync (15 s by default, the suite's HPASyncPeriod here) and acts on what it read; a read that takes a second
// costs a fifteenth of a default sync. Unloaded, such a read takes tens of milliseconds here (the probe's
// figures before the flood are logged), so the bound leaves the loaded 2-core machine a factor of ten and
// more.
const hpaReadBound = time.Second

// TestReadFlood: an identity with `view` in its own namespace keeps four times the server's read slots of
// lists in flight, on the server's own port and through the aggregator, some of them read slowly, for a
// minute. Meanwhile an HPA in another namespace runs, and a probe reads as the HPA's identity what the HPA
// reads: the probe's reads are never refused and keep their p99 under hpaReadBound, the server never refuses
// or holds back a priority read, the HPA keeps reading, and the tenant is held to its share (it waits and is
// refused).
func TestReadFlood(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	const tenantNS, hpaNS, sa = "e2e-flood-tenant", "e2e-flood-hpa", "viewer"
	newNamespace(ctx, t, tenantNS)
	newNamespace(ctx, t, hpaNS)
	client := suite.cluster.Client()

	_, err := client.RbacV1().RoleBindings(tenantNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenantNS, Name: sa}},
	}, metav1.CreateOptions{})
	must(t, err)
	token := newServiceAccount(ctx, t, tenantNS, sa)
	tenant := map[string]endpoint{}
	for _, via := range vias(suite.server) {
		ep := via.endpoint(t, func(c *rest.Config) { c.BearerToken = token })
		ep.name = "tenant-" + via.name
		tenant[via.name] = ep
	}
	tenantSpec := env.DeploymentSpec{Namespace: tenantNS, Name: "bulk", Replicas: 20, CPURequest: "100m"}
	runDeployment(ctx, t, tenantSpec, fakekubelet.Usage{CPUNanoCores: 10e6, MemoryBytes: 16 << 20})
	tenantList := listNamespace(tenantNS)
	must(t, poll(ctx, "the viewer to list its namespace", func(ctx context.Context) error {
		for _, ep := range tenant {
			if r := fetch(ctx, ep, tenantList); r.failed() {
				return fmt.Errorf("%s: %v", ep.name, r)
			}
		}
		return nil
	}))

	spec := env.DeploymentSpec{Namespace: hpaNS, Name: "web", Replicas: 2, CPURequest: "100m"}
	_, want := runDeployment(ctx, t, spec, fakekubelet.Usage{CPUNanoCores: 50e6, MemoryBytes: 32 << 20})
	// minReplicas = maxReplicas: the HPA reads every sync and never scales.
	must(t, env.CreateCPUHPA(ctx, client, hpaNS, spec.Name, spec.Replicas, spec.Replicas, 50))
	must(t, waitHPA(ctx, hpaNS, spec.Name, "read 50% utilization", func(h *autoscalingv2.HorizontalPodAutoscaler) bool { return utilization(h) == 50 }))

	// The probe reads through the aggregator as the HPA controller does, under its identity: the cluster
	// admin impersonates it.
	hpaCfg := rest.CopyConfig(suite.cluster.RESTConfig())
	hpaCfg.Impersonate = rest.ImpersonationConfig{UserName: apiserver.DefaultPriorityReaders[0]}
	hpaClient, err := rest.HTTPClientFor(hpaCfg)
	must(t, err)
	probe := endpoint{name: "hpa", base: hpaCfg.Host, client: hpaClient}
	selected := listSelected(hpaNS, spec.Selector().String())
	probeFor := func(d time.Duration) []result {
		var out []result
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		every(ctx, 200*time.Millisecond, func() {
			if r := fetch(ctx, probe, selected); ctx.Err() == nil {
				out = append(out, r)
			}
		})
		return out
	}
	unloaded := probeFor(10 * time.Second)

	direct := directEndpoint(t, suite.server)
	// limitCounts are the read limit's waits and refusals, of the priority readers and of the others.
	limitCounts := func() (c [2][2]float64) {
		body, err := selfMetrics(ctx, direct)
		must(t, err)
		for i, reader := range []string{`reader="priority"`, `reader="other"`} {
			for j, name := range []string{"group_metrics_server_api_reads_waited_total", "group_metrics_server_api_reads_rejected_total"} {
				c[i][j], _, err = promtext.Value(body, name, reader)
				must(t, err)
			}
		}
		return c
	}
	countsBefore := limitCounts()

	// The flood: four times the slots of back-to-back lists per way in, and two slow readers per way in. The
	// server's slots default to its CPUs; it runs on this machine, as the test does.
	slots := runtime.GOMAXPROCS(0)
	floodCtx, stopFlood := context.WithTimeout(ctx, floodFor)
	defer stopFlood()
	var (
		wg          sync.WaitGroup
		flood, slow []result
		mu          sync.Mutex
	)
	wg.Go(func() {
		eps := []endpoint{tenant["aggregator"], tenant["direct"]}
		flood = runLoad(floodCtx, eps, []shape{tenantList}, 4*slots, floodFor)
	})
	for _, ep := range tenant {
		for range 2 {
			wg.Go(func() {
				for floodCtx.Err() == nil {
					r := slowFetch(floodCtx, ep, tenantList)
					mu.Lock()
					slow = append(slow, r)
					mu.Unlock()
				}
			})
		}
	}
	gaps := watchGaps(ctx, aggregatorEndpoint(t, suite.cluster), selected, want, hpaNS, spec.Name)
	loaded := probeFor(floodFor)
	hpa := gaps()
	wg.Wait()

	stats := summarize(slices.Concat(unloaded, loaded, flood))
	t.Logf("%d read slots; the probe unloaded for 10 s, then loaded beside the flood, and the flood:\n%s", slots, formatStats(stats, floodFor))
	before, after := summarize(unloaded), summarize(loaded)
	if len(after) != 1 || len(before) != 1 {
		t.Fatalf("probe results: %d kinds before the flood, %d during, want 1 each", len(before), len(after))
	}
	t.Logf("the HPA's reads: p99 %v unloaded, %v under the flood (bound %v), %d of %d failed; %d slow reads by the tenant",
		before[0].p99, after[0].p99, hpaReadBound, after[0].fails, after[0].requests, len(slow))
	if failed, n := firstFailures(loaded, 5); n > 0 {
		t.Errorf("%d of the HPA identity's reads failed under the flood, first: %v", n, failed)
	}
	if after[0].p99 > hpaReadBound {
		t.Errorf("the HPA identity's reads took %v at p99 under the flood, more than %v", after[0].p99, hpaReadBound)
	}
	counts := limitCounts()
	for i := range counts {
		for j := range counts[i] {
			counts[i][j] -= countsBefore[i][j]
		}
	}
	t.Logf("during the flood, the priority readers' reads waited %v times and were refused %v times; the others' %v and %v",
		counts[0][0], counts[0][1], counts[1][0], counts[1][1])
	// At most two priority reads are in flight at once (the probe's, one at a time, and the HPA's sync): the
	// priority slot and the shared slot the tenant's share leaves free serve both at once, so none may wait.
	if counts[0] != [2]float64{} {
		t.Errorf("the priority readers' reads waited %v times and were refused %v times during the flood, want none", counts[0][0], counts[0][1])
	}
	if hpa.hpaGap > 0 {
		t.Errorf("the HPA's ScalingActive was not True for %v during the flood", hpa.hpaGap)
	}
	// The flood must have reached the limit, or the test showed nothing: the tenant's reads waited for its
	// share of the slots.
	if counts[1][0] == 0 {
		t.Errorf("none of the tenant's %d lists waited for a slot: the flood never reached its share of the slots", len(flood))
	}
}

// slowFetch is fetch for a reader that takes its answer 512 bytes at a time, 50 ms apart.
func slowFetch(ctx context.Context, ep endpoint, sh shape) result {
	r := result{endpoint: ep.name, shape: sh.name + "-slow", start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.base+sh.path, nil)
	if err != nil {
		r.err = err
		return r
	}
	resp, err := ep.client.Do(req)
	if err != nil {
		r.end, r.err = time.Now(), err
		return r
	}
	defer func() { _ = resp.Body.Close() }()
	buf := make([]byte, 512)
	every(ctx, 50*time.Millisecond, func() {
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			cancel()
		}
	})
	r.end, r.code = time.Now(), resp.StatusCode
	return r
}
