//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestUkpdPages runs pods on a kraftlet node of an account of 2,000 instances,
// on a ukpd that lists at most 100 a request.
func TestUkpdPages(t *testing.T) {
	ctx := begin(t, 6*time.Minute)
	const (
		ns      = "e2e-ukpd-pages"
		node    = "kraftlet-pages"
		ours    = 50
		foreign = 2000 - ours
	)
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	metricLag := 2*suite.resolution + suite.timeout
	metricsBound := metricLag + 30*time.Second

	// Instances of pods this cluster does not have, created first: the
	// oldest, listed first.
	var added []string
	t.Cleanup(func() {
		for _, id := range added {
			_ = suite.ukpd.Remove(id)
		}
	})
	for i := range foreign {
		in, err := suite.ukpd.AddInstance(fakeukpd.InstanceSpec{
			Namespace: "elsewhere", Pod: fmt.Sprintf("other-%04d", i), Container: "app", Node: "kraftlet", CPUCores: 0.01,
		})
		must(t, err)
		added = append(added, in.UUID)
	}

	kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	uk := env.DeploymentSpec{Namespace: ns, Name: "paged", Replicas: ours, CPURequest: "100m"}
	must(t, env.CreateKraftletDeployment(ctx, client, uk))
	pods, err := env.WaitForRunningPods(ctx, client, ns, uk.Selector(), ours)
	must(t, err)
	// The sync creates each Running pod's instance from its informer, so the
	// last ones may still be on their way: wait for them, bounded.
	instancesCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must(t, cluster.Poll(instancesCtx, "the account to hold 2,000 instances", watched(), func(context.Context) error {
		if n := len(suite.ukpd.Instances()); n < 2000 {
			return fmt.Errorf("the account holds %d instances, want at least 2,000", n)
		}
		return nil
	}))
	running := time.Now()
	listsBefore := suite.ukpd.ListRequests()
	want := map[string]topRow{}
	for _, p := range pods {
		want[p.Name] = topRow{milliCPU: 40, memory: "64Mi"}
	}
	waitTop(ctx, t, ns, want, metricsBound)
	t.Logf("kubectl top shows all %d pods, whose instances are the newest of %d over pages of %d, %v after they ran; %d list requests meanwhile",
		ours, len(suite.ukpd.Instances()), env.UkpdPageSize, time.Since(running).Round(time.Millisecond), suite.ukpd.ListRequests()-listsBefore)
}
