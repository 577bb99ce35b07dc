package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

const (
	fleetBinary    = "fake-kubelet-fleet"
	nodePrefix     = "bench-node-"
	benchLabel     = "benchcompare"
	createWorkers  = 32
	createAttempts = 3
)

// controllers are the only kube-controller-manager controllers the benchmark
// needs: the default ServiceAccount of every namespace, without which pods
// are not admitted. The rest (garbage collector, workloads, HPA) would hold
// every pod in memory and spend CPU on them for nothing.
var controllers = "serviceaccount,serviceaccount-token,root-ca-cert-publisher,namespace"

// app is one set of PodsPerApp pods labelled app=<name> in a namespace.
type app struct{ namespace, name string }

// startCluster starts the control plane without a scheduler (every pod is
// created bound to its node) and with only the controllers pods need.
func (b *bench) startCluster(ctx context.Context) (err error) {
	b.logf("starting the control plane in %s", cmp.Or(b.opts.WorkDir, "a temporary directory"))
	b.cluster, err = cluster.Start(ctx, cluster.Options{
		BinDir:                b.binDir,
		WorkDir:               b.opts.WorkDir,
		WithoutScheduler:      true,
		StartTimeout:          3 * time.Minute,
		ControllerManagerArgs: []string{"--controllers=" + controllers},
	})
	return err
}

// buildFleet builds the fleet binary into the bin directory; the Go build
// cache makes this quick after the first time.
func (b *bench) buildFleet(ctx context.Context) error {
	b.logf("building %s", fleetBinary)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(b.binDir, fleetBinary), "./test/fakekubelet/cmd/fake-kubelet-fleet")
	cmd.Dir = b.root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", fleetBinary, err)
	}
	return nil
}

// startFleet runs the fleet as its own process, so that its CPU is not the
// harness's, registers its nodes and waits until kwok has made them Ready.
func (b *bench) startFleet(ctx context.Context) error {
	// Registering is one create per node at 16 in flight.
	wait := 2*time.Minute + time.Duration(b.opts.Nodes)*100*time.Millisecond
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// The fleet's node ports are picked free, but another process on the
	// machine can take one before the fleet listens; such a start is retried.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		err := b.launchFleet(waitCtx, attempt)
		if err == nil {
			break
		}
		if attempt == attempts || !strings.Contains(err.Error(), "already in use") {
			return err
		}
		b.logf("the fleet could not listen (%v); starting it again", err)
	}
	b.logf("fleet up, waiting for %d nodes to be Ready", b.opts.Nodes)
	return b.pollEvery(waitCtx, "every node to be Ready", 2*time.Second, func(ctx context.Context) error {
		nodes, err := b.cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		ready := 0
		for i := range nodes.Items {
			if cluster.NodeReady(&nodes.Items[i]) {
				ready++
			}
		}
		if ready < b.opts.Nodes {
			return fmt.Errorf("%d of %d nodes Ready", ready, b.opts.Nodes)
		}
		return nil
	})
}

// launchFleet starts the fleet process and waits until it has written
// fleet.json, which it does once every node listens and is registered.
func (b *bench) launchFleet(ctx context.Context, attempt int) error {
	c := b.cluster
	certDir := filepath.Join(c.WorkDir(), "fleet")
	if err := os.RemoveAll(certDir); err != nil {
		return err
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return err
	}
	name := fleetBinary
	if attempt > 1 {
		name = fmt.Sprintf("%s-%d", fleetBinary, attempt)
	}
	b.logf("starting the fleet: %d nodes", b.opts.Nodes)
	p, err := c.StartProcess(name, filepath.Join(b.binDir, fleetBinary),
		"--kubeconfig="+c.KubeconfigPath(),
		"--nodes="+strconv.Itoa(b.opts.Nodes),
		"--node-name-prefix="+nodePrefix,
		"--cert-dir="+certDir,
		"--register-nodes",
		"--node-labels=type=kwok",
		"--node-max-pods="+strconv.Itoa(max(110, 2*b.opts.PodsPerNode)),
		// Both servers present the admin client certificate to kubelets.
		"--client-ca-file="+c.CACertFile(),
		"--control-address=127.0.0.1:"+strconv.Itoa(ports[0]),
	)
	if err != nil {
		return err
	}
	b.fleetProc = p
	return cluster.Poll(ctx, "the fleet to write "+fakekubelet.StateFileName, []*cluster.Process{p}, func(context.Context) error {
		state, err := fakekubelet.ReadFleetState(certDir)
		b.fleet = state
		return err
	})
}

// pollEvery polls check every interval, for checks that list thousands of
// objects; it fails early when the fleet exits.
func (b *bench) pollEvery(ctx context.Context, what string, interval time.Duration, check func(context.Context) error) error {
	watch := []*cluster.Process{b.fleetProc}
	return cluster.PollUntil(ctx, what, interval, 30*time.Second, watch, check)
}

// createWorkload creates the namespaces and every pod, bound to its node, and
// waits until kwok runs them all and the fleet serves them all.
func (b *bench) createWorkload(ctx context.Context) error {
	o := b.opts
	total := o.totalPods()
	// Pods are numbered g = 0 .. total-1: pod g runs on node g mod Nodes,
	// belongs to app g / PodsPerApp, and apps are dealt to namespaces in
	// turn, so an app's pods sit on different nodes as a scheduler spreads
	// them.
	numApps := (total + o.PodsPerApp - 1) / o.PodsPerApp
	b.apps = make([]app, numApps)
	for a := range b.apps {
		b.apps[a] = app{namespace: fmt.Sprintf("bench-%03d", a%o.Namespaces), name: fmt.Sprintf("app-%05d", a)}
	}
	b.logf("creating %d namespaces", o.Namespaces)
	if err := b.createNamespaces(ctx); err != nil {
		return err
	}
	b.logf("creating %d pods (%d apps of %d, %d containers each)", total, numApps, o.PodsPerApp, o.Containers)
	began := time.Now()
	if err := b.createPods(ctx, total); err != nil {
		return err
	}
	b.logf("created %d pods in %v", total, time.Since(began).Round(time.Second))

	// kwok marks about 150 pods a second Running; allow a third of that.
	wait := 3*time.Minute + time.Duration(total)*20*time.Millisecond
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := time.Now()
	err := b.pollEvery(waitCtx, fmt.Sprintf("%d pods to be Running", total), 5*time.Second, func(ctx context.Context) error {
		list, err := b.cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{
			ResourceVersion: "0",
			LabelSelector:   benchLabel + "=pod",
			FieldSelector:   "status.phase=Running",
		})
		if err != nil {
			return err
		}
		if len(list.Items) < total {
			if time.Since(last) > 30*time.Second {
				b.logf("  %d of %d pods Running", len(list.Items), total)
				last = time.Now()
			}
			return fmt.Errorf("%d of %d pods Running", len(list.Items), total)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.logf("all %d pods Running %v after the first was created", total, time.Since(began).Round(time.Second))
	return b.pollEvery(waitCtx, "the fleet to serve every pod", 2*time.Second, func(ctx context.Context) error {
		return b.fleetServes(ctx, total)
	})
}

// createNamespaces creates the probe namespace and bench-000 onwards, 16 at
// a time, each waited for at most a minute.
func (b *bench) createNamespaces(ctx context.Context) error {
	names := []string{probeNamespace}
	for i := range b.opts.Namespaces {
		names = append(names, fmt.Sprintf("bench-%03d", i))
	}
	errs := make([]error, len(names))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			errs[i] = env.CreateNamespace(ctx, b.cluster.Client(), name)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createPods creates pods 0 .. total-1 with createWorkers in flight; the
// first failure stops the rest.
func (b *bench) createPods(ctx context.Context, total int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, createWorkers)
	var wg sync.WaitGroup
	last := time.Now()
	for g := 0; g < total && ctx.Err() == nil; g++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := b.createPod(ctx, g); err != nil {
				cancel(err)
			}
		})
		if time.Since(last) > 15*time.Second {
			b.logf("  %d of %d pods created", g, total)
			last = time.Now()
		}
	}
	wg.Wait()
	return context.Cause(ctx)
}

func (b *bench) createPod(ctx context.Context, g int) error {
	a := b.apps[g/b.opts.PodsPerApp]
	pod := b.podObject(a.namespace, fmt.Sprintf("%s-%d", a.name, g%b.opts.PodsPerApp),
		fmt.Sprintf("%s%d", nodePrefix, g%b.opts.Nodes), map[string]string{"app": a.name, benchLabel: "pod"})
	var err error
	for attempt := range createAttempts {
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = b.cluster.Client().CoreV1().Pods(a.namespace).Create(callCtx, pod, metav1.CreateOptions{})
		cancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * time.Second)
	}
	return fmt.Errorf("create pod %s/%s: %w", a.namespace, pod.Name, err)
}

// podObject is a pod bound to node with Containers containers that request
// a little CPU and memory, no service account token and no grace period.
func (b *bench) podObject(namespace, name, node string, labels map[string]string) *corev1.Pod {
	containers := make([]corev1.Container, b.opts.Containers)
	for i := range containers {
		containers[i] = corev1.Container{
			Name:  fmt.Sprintf("c%d", i),
			Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("16Mi"),
			}},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Containers:                    containers,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
}

// fleetServes fails unless the fleet serves want pods, over all its nodes.
func (b *bench) fleetServes(ctx context.Context, want int) error {
	var nodes []struct {
		NumPods int `json:"numPods"`
	}
	if err := (fakecore.Control{Address: b.fleet.ControlAddress}).Do(ctx, http.MethodGet, "/v1/nodes", nil, &nodes); err != nil {
		return err
	}
	n := 0
	for _, node := range nodes {
		n += node.NumPods
	}
	if n < want {
		return fmt.Errorf("the fleet serves %d of %d pods", n, want)
	}
	return nil
}
