//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// rolloutKubelet stands in for the kubelet and kube-proxy of the nodes it
// owns, for the server's pods only: for each pod the scheduler binds to one
// of them it starts a server process on a port of its own and marks the pod
// Ready once that process's /readyz answers 200; for each pod being deleted
// it takes the pod out of the proxy, stops its process with SIGTERM and
// then removes the pod. The proxy listens on the port the Service and
// APIServices name and sends each new connection to a Ready pod's process,
// as a Service routes to ready endpoints only.
type rolloutKubelet struct {
	client kubernetes.Interface
	c      *cluster.Cluster
	binDir string
	args   []string // the server's command line but --secure-port
	nodes  map[string]bool

	mu               sync.Mutex
	pods             map[string]*podProcess // by pod name
	ready            []string               // the Ready pods' addresses, the proxy's backends
	next             int
	started, stopped int // for the test's log
}

type podProcess struct {
	proc  *cluster.Process
	addr  string // 127.0.0.1:<port>
	ready bool
}

// run reconciles every 200 ms until ctx is done.
func (k *rolloutKubelet) run(ctx context.Context, errs chan<- error) {
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			select {
			case errs <- err:
			default:
			}
		}
		return false, nil
	})
}

func (k *rolloutKubelet) sync(ctx context.Context) error {
	pods, err := k.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + serverDeployment})
	for i := 0; err == nil && i < len(pods.Items); i++ {
		p := &pods.Items[i]
		if !k.nodes[p.Spec.NodeName] {
			continue
		}
		k.mu.Lock()
		pp := k.pods[p.Name]
		k.mu.Unlock()
		switch {
		case p.DeletionTimestamp != nil:
			err = k.remove(ctx, p, pp)
		case pp == nil:
			err = k.start(p)
		case !pp.ready:
			err = k.markIfReady(ctx, p, pp)
		}
	}
	return err
}

func (k *rolloutKubelet) start(p *corev1.Pod) error {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return err
	}
	args := append(slices.Clone(k.args), "--secure-port="+strconv.Itoa(ports[0]))
	proc, err := k.c.StartProcess("rollout-"+p.Name, filepath.Join(k.binDir, env.ServerBinary), args...)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods[p.Name] = &podProcess{proc: proc, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	k.started++
	return nil
}

// readyzClient asks /readyz as the kubelet's probe does: HTTPS without
// verifying the certificate (the kubelet does not verify probes either).
var readyzClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the kubelet probes

func (k *rolloutKubelet) markIfReady(ctx context.Context, p *corev1.Pod, pp *podProcess) error {
	select {
	case <-pp.proc.Done():
		return fmt.Errorf("pod %s: its process exited: %w", p.Name, pp.proc.Err())
	default:
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+pp.addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := readyzClient.Do(req)
	if err != nil {
		return nil // not listening yet
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	now := metav1.Now()
	p = p.DeepCopy()
	p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &now
	p.Status.Conditions, p.Status.ContainerStatuses = nil, nil
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the next sync tries again
		}
		return fmt.Errorf("mark pod %s ready: %w", p.Name, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	pp.ready = true
	k.ready = append(k.ready, pp.addr)
	return nil
}

// remove takes a deleted pod's process out of the proxy, stops it as the
// kubelet stops a container (SIGTERM, then its grace period), and removes
// the pod.
func (k *rolloutKubelet) remove(ctx context.Context, p *corev1.Pod, pp *podProcess) error {
	if pp != nil {
		k.mu.Lock()
		k.ready = slices.DeleteFunc(slices.Clone(k.ready), func(a string) bool { return a == pp.addr })
		k.mu.Unlock()
		if err := pp.proc.Stop(); err != nil {
			return fmt.Errorf("stop pod %s: %w", p.Name, err)
		}
		if err := pp.proc.Err(); err != nil {
			return fmt.Errorf("pod %s: process exited after SIGTERM: %w, want status 0", p.Name, err)
		}
		k.mu.Lock()
		delete(k.pods, p.Name)
		k.stopped++
		k.mu.Unlock()
	}
	err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove pod %s: %w", p.Name, err)
	}
	return nil
}

// backend picks the next ready backend, round robin; "" when none is.
func (k *rolloutKubelet) backend() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.ready) == 0 {
		return ""
	}
	k.next = (k.next + 1) % len(k.ready)
	return k.ready[k.next]
}

// serve accepts connections on l and splices each to a backend, until l
// closes.
func (k *rolloutKubelet) serve(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go k.splice(conn)
	}
}

func (k *rolloutKubelet) splice(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	addr := k.backend()
	if addr == "" {
		return // no ready endpoint: the connection is closed
	}
	up, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
	<-done
}

func (k *rolloutKubelet) stopAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, pp := range k.pods {
		_ = pp.proc.Stop()
	}
}

// rolloutNode is a node no kwok manages (no kwok.x-k8s.io/node
// annotation): rolloutKubelet runs its pods. The taint keeps other tests'
// pods off it.
func rolloutNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", rolloutLabel: "true",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: rolloutLabel, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		},
	}
}
