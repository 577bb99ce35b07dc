//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// Short lifetimes for TestCertificateRotation, within what the controller accepts (pkg/certs
// Policy.Validate): a pair lives 30s and is renewed at 19s (a third of its 33s left, 3s of it backdated); the
// CA lives 90s and its successor is trusted from 57s, signs from about 62s, and the old CA leaves the
// caBundle about 66s after the start.
var rotationArgs = []string{
	"--serving-cert-validity=30s", "--ca-validity=90s", "--propagation-delay=4s", "--sync-period=1s",
}

const rotationBound = 150 * time.Second

// TestCertificateRotation runs manifests/high-availability's two replicas on a cluster of its own while a
// certificate controller rotates the serving certificate.
func TestCertificateRotation(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	c, fleet := ownCluster(ctx, t, 1)
	began := time.Now()
	s, err := env.DeployServer(ctx, c, env.ServerConfig{
		ManifestsDir:          repoPath(t, "manifests", "high-availability"),
		BinDir:                suite.binDir,
		KubeletCAFile:         fleet.CAFile,
		MetricResolution:      suite.resolution,
		KubeletRequestTimeout: suite.timeout,
		ExtraArgs:             []string{env.PermitPortSharing},
		ControllerArgs:        rotationArgs,
		ProcessName:           "gms-rotation-0",
	})
	must(t, err)
	second, err := s.StartAgain("gms-rotation-1")
	must(t, err)
	procs := []*cluster.Process{s.Process, second}
	// Both ready, before anything is counted.
	connectReplicas(ctx, t, s, procs)

	// Clients through the aggregator for as long as the sampling runs.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var results []result
	wg.Go(func() {
		results = runLoad(loadCtx, []endpoint{aggregatorEndpoint(t, c)}, []shape{listAllPods()}, haClients, rotationBound)
	})

	var (
		firstCA               string
		samples               = map[*cluster.Process][]servedPair{}
		sampleFails           []string
		rotationAt, bothNewAt time.Duration
	)
	sampleCtx, stopSampling := context.WithTimeout(ctx, rotationBound)
	defer stopSampling()
	every(sampleCtx, 500*time.Millisecond, func() {
		bundle, err := env.CABundle(ctx, c, env.MetricsAPIServices[0])
		must(t, err)
		if len(certs.ParseCerts(bundle)) > 1 && rotationAt == 0 {
			rotationAt = time.Since(began)
		}
		seen := map[*cluster.Process]bool{}
		for dial := 0; dial < 16 && len(seen) < len(procs); dial++ {
			p, leaf, err := servedCertificate(ctx, s, procs, bundle)
			if err != nil {
				sampleFails = append(sampleFails, fmt.Sprintf("+%v: %v", time.Since(began).Round(time.Millisecond), err))
				continue
			}
			seen[p] = true
			issuer, serial := leaf.Issuer.CommonName, leaf.SerialNumber.String()
			firstCA = cmp.Or(firstCA, issuer)
			if l := samples[p]; len(l) == 0 || l[len(l)-1].serial != serial {
				samples[p] = append(l, servedPair{at: time.Since(began), serial: serial, issuer: issuer})
			}
		}
		if bothNewAt == 0 && allFromNext(samples, procs, firstCA) {
			bothNewAt = time.Since(began)
		}
		// Past the old CA's retirement, with a margin.
		if bothNewAt > 0 && time.Since(began) > bothNewAt+10*time.Second {
			stopSampling()
		}
	})
	stopLoad()
	wg.Wait()

	for _, p := range procs {
		select {
		case <-p.Done():
			t.Errorf("%s exited during the rotation: %v", p.Name(), p.Err())
		default:
		}
		var serials []string
		for _, smp := range samples[p] {
			serials = append(serials, fmt.Sprintf("+%v %s…(%s)", smp.at.Round(100*time.Millisecond), smp.serial[:8], smp.issuer))
		}
		t.Logf("%s served %d pairs: %s", p.Name(), len(samples[p]), strings.Join(serials, ", "))
		if len(samples[p]) < 3 {
			t.Errorf("%s served %d pairs, want the first, a renewal and one of the new CA", p.Name(), len(samples[p]))
		}
	}
	failed, n := firstFailures(results, 5)
	t.Logf("%d requests through the aggregator, %d failed; rotation began (caBundle with two CAs) at +%v, both replicas served the new CA's pair at +%v (%v later); %d samples did not verify",
		len(results), n, rotationAt.Round(time.Millisecond), bothNewAt.Round(time.Millisecond), (bothNewAt - rotationAt).Round(time.Millisecond), len(sampleFails))
	switch {
	case n > 0:
		t.Errorf("%d requests failed, first: %s", n, strings.Join(failed, "; "))
	case len(results) == 0:
		t.Error("no request was sent")
	}
	if len(sampleFails) > 0 {
		t.Errorf("a replica served a pair the caBundle did not verify: %s", strings.Join(sampleFails, "; "))
	}
	if rotationAt == 0 || bothNewAt == 0 {
		t.Errorf("no complete CA rotation within %v (began %v, both new %v)", rotationBound, rotationAt, bothNewAt)
	}
}

// servedPair is a serving pair a replica was first seen serving, at a time since the deployment.
type servedPair struct {
	at             time.Duration
	serial, issuer string
}

// allFromNext says whether every replica's latest pair is of a CA other than the first.
func allFromNext(samples map[*cluster.Process][]servedPair, procs []*cluster.Process, firstCA string) bool {
	return !slices.ContainsFunc(procs, func(p *cluster.Process) bool {
		l := samples[p]
		return len(l) == 0 || l[len(l)-1].issuer == firstCA
	})
}

// The certificate controller's Lease, as manifests/base names it.
const (
	controllerLeaseNamespace = "kube-system"
	controllerLease          = "group-metrics-server-cert-controller"
)

// leaseLostBound is how soon a standing-by replica leads once the Lease is gone and its holder dead: it tries
// every RetryPeriod (2 s, up to 4.4 s with client-go's jitter factor 1.2), finds no Lease and creates one.
// Two tries, so that one that meets a slow API does not fail it, and a second for the API.
const leaseLostBound = 10 * time.Second

// TestCertControllerLeaseLost runs a second replica of the suite's certificate controller, kills the replica
// that leads (SIGKILL: it releases nothing) and deletes the Lease: the other replica creates the Lease again
// and leads within leaseLostBound, rather than no replica ever leading (which a controller without the right
// to create its Lease did).
func TestCertControllerLeaseLost(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	s := suite.server
	leader := s.Controller
	replica, err := s.StartControllerReplica(ctx)
	must(t, err)
	t.Cleanup(func() {
		_ = replica.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The suite's controller runs again, as the Deployment's pod would be restarted.
		if err := s.Register(ctx); err != nil {
			t.Errorf("the suite's certificate controller: %v", err)
		}
	})
	must(t, logged(leader, `"Successfully acquired lease"`))
	must(t, boundedPoll(ctx, 30*time.Second, "the second replica to stand by", []*cluster.Process{replica}, func(context.Context) error {
		return logged(replica, `"Attempting to acquire leader lease`)
	}))
	if err := logged(replica, `"Successfully acquired lease"`); err == nil {
		t.Fatal("the second replica leads while the first one holds the Lease")
	}
	must(t, syscall.Kill(leader.Pid(), syscall.SIGKILL))
	<-leader.Done()
	leases := suite.cluster.Client().CoordinationV1().Leases(controllerLeaseNamespace)
	must(t, leases.Delete(ctx, controllerLease, metav1.DeleteOptions{}))
	lost := time.Now()
	must(t, boundedPoll(ctx, leaseLostBound, "the second replica to create the Lease and lead", []*cluster.Process{replica}, func(ctx context.Context) error {
		l, err := leases.Get(ctx, controllerLease, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "":
			return errors.New("the Lease has no holder")
		}
		return logged(replica, `"Successfully acquired lease"`)
	}))
	t.Logf("leader killed and Lease deleted: the other replica created it and leads %v later (bound %v)", since(lost), leaseLostBound)
}

// logged says whether p's log has a line holding every one of words.
func logged(p *cluster.Process, words ...string) error {
	lines, err := linesWith(p.LogPath(), words...)
	return cmp.Or(err, wantf(len(lines) > 0, "%s has not logged %q", p.Name(), words))
}
