package options

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
)

// checkDiff fails t, naming what, when got differs from want.
func checkDiff(t *testing.T, what string, want, got any, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCertElectorRecreatesDeletedLease deletes the Lease under a leader:
// the elector creates it again, holds it, and keeps leading.
func TestCertElectorRecreatesDeletedLease(t *testing.T) {
	const ns, name, id = "kube-system", "group-metrics-server-cert-controller", "replica-a"
	kube := fake.NewClientset()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, name, kube.CoreV1(), kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	must(t, err)
	le := componentbaseconfig.LeaderElectionConfiguration{ResourceName: name, LeaseDuration: metav1.Duration{Duration: 2 * time.Second},
		RenewDeadline: metav1.Duration{Duration: time.Second}, RetryPeriod: metav1.Duration{Duration: 20 * time.Millisecond}}
	health := certs.NewHealth(certs.HealthConfig{ReadyWithin: time.Minute, LiveWithin: time.Hour})
	leading := make(chan struct{})
	elector, watchdog, err := newCertElector(le, health.Lock(lock), health, func(ctx context.Context) {
		close(leading)
		<-ctx.Done()
	})
	must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		elector.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		t.Fatal("never led with no Lease at the start")
	}

	leases := kube.CoordinationV1().Leases(ns)
	must(t, leases.Delete(ctx, name, metav1.DeleteOptions{}))
	var holder string
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err == nil {
			holder = ptr.Deref(l.Spec.HolderIdentity, "")
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("the deleted Lease was not created again: %v", err)
	}
	if holder != id || !elector.IsLeader() {
		t.Errorf("after the Lease was created again: holder %q, leading %v; want %q, leading", holder, elector.IsLeader(), id)
	}
	if creates := len(slices.DeleteFunc(kube.Actions(), func(a k8stesting.Action) bool {
		return a.GetVerb() != "create" || a.GetResource().Resource != "leases"
	})); creates != 2 {
		t.Errorf("%d creates of the Lease, want 2 (at the start, after the delete)", creates)
	}
	// Every replica exports whether it leads, for the kit's no-leader
	// alert (leader_election_master_status, from component-base).
	want := `
# HELP leader_election_master_status [ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.
# TYPE leader_election_master_status gauge
leader_election_master_status{name="group-metrics-server-cert-controller"} 1
`
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), "leader_election_master_status"); err != nil {
		t.Error(err)
	}
	for _, c := range []healthz.HealthChecker{watchdog, healthz.NamedCheck("sync", health.Live), healthz.NamedCheck("ready", health.Ready)} {
		if err := c.Check(nil); err != nil {
			t.Errorf("%s: %v", c.Name(), err)
		}
	}
}

// TestCertControllerProbes serves the probes on loopback: /readyz follows
// the readiness check and /livez the liveness checks.
func TestCertControllerProbes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	health := certs.NewHealth(certs.HealthConfig{ReadyWithin: 45 * time.Second, LiveWithin: 5 * time.Minute, Clock: clk})
	addr, err := serveCertMetrics(t.Context(), "127.0.0.1:0",
		[]healthz.HealthChecker{healthz.NamedCheck("certificate-sync", health.Live)},
		[]healthz.HealthChecker{healthz.NamedCheck("certificate-sync-or-leader", health.Ready)})
	must(t, err)
	status := func() map[string]int {
		out := map[string]int{}
		for _, p := range []string{"/livez", "/readyz", "/healthz"} {
			resp, err := http.Get("http://" + addr.String() + p)
			must(t, err)
			_ = resp.Body.Close()
			out[p] = resp.StatusCode
		}
		return out
	}
	ok, bad := http.StatusOK, http.StatusInternalServerError
	health.StartedLeading()
	checkDiff(t, "a leader that just started", map[string]int{"/livez": ok, "/readyz": ok, "/healthz": ok}, status())
	clk.Step(time.Minute)
	checkDiff(t, "a leader with no sync for a minute", map[string]int{"/livez": ok, "/readyz": bad, "/healthz": ok}, status())
	clk.Step(5 * time.Minute)
	checkDiff(t, "a leader with no sync for six minutes", map[string]int{"/livez": bad, "/readyz": bad, "/healthz": bad}, status())
}

func TestServeCertMetrics(t *testing.T) {
	ctx := t.Context()
	addr, err := serveCertMetrics(ctx, "127.0.0.1:0", nil, nil)
	must(t, err)
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	for _, want := range []string{"group_metrics_server_certs_syncs_total", "group_metrics_server_certs_last_sync_success_timestamp_seconds"} {
		if !strings.Contains(string(body), "# TYPE "+want+" ") {
			t.Errorf("/metrics has no family %s", want)
		}
	}
	// The same port a second time fails the start instead of serving
	// nothing.
	if _, err := serveCertMetrics(ctx, addr.String(), nil, nil); err == nil {
		t.Error("second listener on a taken port: no error")
	}
}

func TestCertControllerValidateMetricsAddress(t *testing.T) {
	for addr, wantErr := range map[string]bool{":8080": false, "": false, "127.0.0.1:9090": false, "8080": true} {
		o := NewCertControllerOptions()
		o.MetricsBindAddress = addr
		errs := o.Validate()
		if got := slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), "--metrics-bind-address") }); got != wantErr {
			t.Errorf("--metrics-bind-address=%q: errors %v, want a --metrics-bind-address error: %v", addr, errs, wantErr)
		}
	}
}
