//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// rolloutLabel marks the nodes of TestHighAvailabilityRollout, and taints
// them.
const rolloutLabel = "e2e.group-metrics-server.io/rollout"

// TestHighAvailabilityRollout rolls manifests/high-availability's Deployment over two
// nodes, by the real controllers, while clients list through the aggregator.
func TestHighAvailabilityRollout(t *testing.T) {
	ctx := begin(t, 6*time.Minute)
	client := suite.cluster.Client()
	dir := repoPath(t, "manifests", "high-availability")
	deletePDBAtEnd(t)
	seed := deployOwnServer(ctx, t, "rollout-seed", nil, dir)

	var nodeNames []string
	k := &rolloutKubelet{client: client, c: suite.cluster, binDir: suite.binDir, args: seed.Args, nodes: map[string]bool{}, pods: map[string]*podProcess{}}
	for i := range 2 {
		n, err := client.CoreV1().Nodes().Create(ctx, rolloutNode(fmt.Sprintf("rollout-%d", i)), metav1.CreateOptions{})
		must(t, err)
		n.Status = rolloutNode(n.Name).Status
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		must(t, err)
		nodeNames = append(nodeNames, n.Name)
		k.nodes[n.Name] = true
	}
	kctx, stopKubelet := context.WithCancel(ctx)
	kerrs := make(chan error, 1)
	var kwg sync.WaitGroup
	kwg.Go(func() { k.run(kctx, kerrs) })
	t.Cleanup(func() { cleanupRollout(t, k, stopKubelet, &kwg, nodeNames) })

	// The server's Deployment, made to run on the rollout nodes only (their
	// label and taint).
	deploy := manifestDeployment(ctx, t, dir)
	spec := &deploy.Spec.Template.Spec
	spec.NodeSelector = maps.Collect(maps.All(spec.NodeSelector)) // never nil
	spec.NodeSelector[rolloutLabel] = "true"
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: rolloutLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	_, err := client.AppsV1().Deployments("kube-system").Create(ctx, deploy, metav1.CreateOptions{})
	must(t, err)
	must(t, waitRolledOut(ctx, client, kerrs, 1))
	// From here only the pods' processes serve: the proxy takes the port
	// the APIServices name from the seed process.
	must(t, seed.Process.Stop())
	l, err := net.Listen("tcp", seed.Address())
	must(t, err)
	defer func() { _ = l.Close() }()
	go k.serve(l)
	agg := aggregatorEndpoint(t, suite.cluster)
	must(t, cluster.Poll(ctx, "a list through the aggregator", nil, func(ctx context.Context) error {
		r := runLoad(ctx, []endpoint{agg}, []shape{listAllPods()}, 1, time.Second)
		if slices.ContainsFunc(r, func(x result) bool { return !x.failed() }) {
			return nil
		}
		return fmt.Errorf("no list succeeded (%d tried)", len(r))
	}))

	loadCtx, stopLoad := context.WithCancel(ctx)
	var (
		lwg     sync.WaitGroup
		results []result
	)
	lwg.Go(func() { results = runLoad(loadCtx, []endpoint{agg}, []shape{listAllPods()}, haClients, 5*time.Minute) })
	began := time.Now()
	// A new image tag, as an upgrade changes it.
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"ghcr.io/group-metrics-server/group-metrics-server:rollout"}]}}}}`, serverDeployment)
	d, err := client.AppsV1().Deployments("kube-system").Patch(ctx, serverDeployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	err = waitRolledOut(ctx, client, kerrs, d.Generation)
	rolled := time.Since(began)
	stopLoad()
	lwg.Wait()
	must(t, err)

	var failed, told []string
	for _, r := range results {
		switch {
		case r.failed() && r.retryAfter != "":
			told = append(told, r.String())
		case r.failed():
			failed = append(failed, r.String())
		}
	}
	k.mu.Lock()
	started, stopped := k.started, k.stopped
	k.mu.Unlock()
	t.Logf("rollout over %d nodes done in %v: %d pods started, %d stopped; %d clients through the aggregator: %d requests, %d answered with Retry-After, %d failed\n%s",
		len(nodeNames), rolled.Round(time.Millisecond), started, stopped, haClients, len(results), len(told), len(failed), formatStats(summarize(results), rolled))
	if len(told) > 0 {
		t.Logf("told to retry:\n%s", strings.Join(told, "\n"))
	}
	if len(failed) > 0 {
		t.Errorf("%d requests failed during the rollout without being told to retry:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if started != 4 || stopped != 2 {
		t.Errorf("%d pods started and %d stopped, want 4 and 2 (two replicas replaced)", started, stopped)
	}
}

// waitRolledOut waits until the Deployment controller has seen generation
// gen and every replica is updated and available, with no other pod left,
// as kubectl rollout status reports it; it stops early on a kubelet error.
func waitRolledOut(ctx context.Context, client kubernetes.Interface, kerrs <-chan error, gen int64) error {
	return boundedPoll(ctx, 3*time.Minute, "the rollout", nil, func(ctx context.Context) error {
		select {
		case err := <-kerrs:
			return fmt.Errorf("kubelet stand-in: %w", err)
		default:
		}
		d, err := client.AppsV1().Deployments("kube-system").Get(ctx, serverDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := *d.Spec.Replicas
		s := d.Status
		if s.ObservedGeneration < gen || s.UpdatedReplicas != want || s.Replicas != want || s.AvailableReplicas != want {
			return fmt.Errorf("generation %d observed %d; replicas %d, updated %d, available %d, want %d", gen, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want)
		}
		return nil
	})
}

// cleanupRollout deletes the Deployment, stops the kubelet stand-in and
// every process it started, and removes the pods and nodes.
func cleanupRollout(t *testing.T, k *rolloutKubelet, stop context.CancelFunc, wg *sync.WaitGroup, nodes []string) {
	ctx, cancel := context.WithTimeout(suite.ctx, time.Minute)
	defer cancel()
	client := suite.cluster.Client()
	if err := client.AppsV1().Deployments("kube-system").Delete(ctx, serverDeployment, metav1.DeleteOptions{}); err != nil {
		t.Logf("delete the Deployment: %v", err)
	}
	stop()
	wg.Wait()
	k.stopAll()
	pods, err := client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + serverDeployment})
	for i := 0; err == nil && i < len(pods.Items); i++ {
		if p := pods.Items[i]; k.nodes[p.Spec.NodeName] {
			_ = client.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	}
	for _, n := range nodes {
		if err := client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete node %s: %v", n, err)
		}
	}
}
