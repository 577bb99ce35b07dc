//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// Short lifetimes for TestCertificateRotation, within what the controller
// accepts (pkg/certs Policy.Validate): a pair lives 30s and is renewed at
// 19s (a third of its 33s left, 3s of it backdated); the CA lives 90s and
// its successor is trusted from 57s, signs from about 62s, and the old CA
// leaves the caBundle about 66s after the start.
var rotationArgs = []string{
	"--serving-cert-validity=30s",
	"--ca-validity=90s",
	"--propagation-delay=4s",
	"--sync-period=1s",
}

const rotationBound = 150 * time.Second

// TestCertificateRotation runs manifests/high-availability's two replicas on a cluster of its own
// while a certificate controller rotates the serving certificate.
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
	var (
		wg      sync.WaitGroup
		results []result
	)
	wg.Go(func() {
		results = runLoad(loadCtx, []endpoint{aggregatorEndpoint(t, c)}, []shape{listAllPods()}, haClients, rotationBound)
	})

	firstCA := ""
	var (
		samples     = map[*cluster.Process][]servedPair{}
		sampleFails []string
		rotationAt  time.Duration
		bothNewAt   time.Duration
	)
	sampleCtx, stopSampling := context.WithTimeout(ctx, rotationBound)
	defer stopSampling()
	every(sampleCtx, 500*time.Millisecond, func() {
		bundle, err := env.CABundle(ctx, c, env.MetricsAPIServices[0])
		must(t, err)
		if n := len(certs.ParseCerts(bundle)); n > 1 && rotationAt == 0 {
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
			issuer := leaf.Issuer.CommonName
			if firstCA == "" {
				firstCA = issuer
			}
			if l := samples[p]; len(l) == 0 || l[len(l)-1].serial != leaf.SerialNumber.String() {
				samples[p] = append(l, servedPair{at: time.Since(began), serial: leaf.SerialNumber.String(), issuer: issuer})
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
	if n > 0 {
		t.Errorf("%d requests failed, first: %s", n, strings.Join(failed, "; "))
	}
	if len(results) == 0 {
		t.Error("no request was sent")
	}
	if len(sampleFails) > 0 {
		t.Errorf("a replica served a pair the caBundle did not verify: %s", strings.Join(sampleFails, "; "))
	}
	if rotationAt == 0 || bothNewAt == 0 {
		t.Errorf("no complete CA rotation within %v (began %v, both new %v)", rotationBound, rotationAt, bothNewAt)
	}
}

// servedPair is a serving pair a replica was first seen serving, at a time
// since the deployment.
type servedPair struct {
	at             time.Duration
	serial, issuer string
}

// allFromNext says whether every replica's latest pair is of a CA other than
// the first.
func allFromNext(samples map[*cluster.Process][]servedPair, procs []*cluster.Process, firstCA string) bool {
	for _, p := range procs {
		l := samples[p]
		if len(l) == 0 || l[len(l)-1].issuer == firstCA {
			return false
		}
	}
	return true
}
