package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// What runs on the real node, all in namespace realNS, which the
// PodNodeSelector annotation keeps there: a Deployment of realWebReplicas
// pods of the workload image (busybox httpd), and the LeaderWorkerSet
// project's sample, docs/examples/sample/lws.yaml and
// horizontal-pod-autoscaler.yaml of sigs.k8s.io/lws, applied as published.
//
// They fit the node's CPU: the kubelet reserves none (test/cluster
// node_config.go sets no kubeReserved or systemReserved, and its eviction
// thresholds are memory and disk), so its allocatable CPU is every core,
// 2000m on a 2-core machine. The sample's pods request 50m each: its 3
// groups of 4 ask 600m, and the 5 groups lws-hpa may scale it to 1000m; web
// asks 2 × 100m. 1200m at most.
const (
	realNS          = "real"
	realWeb         = "web"
	realWebReplicas = 2
	lwsSample       = "leaderworkerset-sample"
	lwsSampleHPA    = "lws-hpa"
	// lwsSamplePods is the sample's replicas × size.
	lwsSamplePods = 3 * 4
	// realNodeTimeout bounds starting the node and its pods, and their
	// first readings.
	realNodeTimeout = 3 * time.Minute
)

// realNodeMissing says what this machine lacks to run the real node, and
// what provides it, or returns nil when it has everything
// (cluster.StartRealNode checks the same).
func realNodeMissing(bin string) error {
	var missing []string
	for _, b := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := cluster.FindCNIBinDir(); err != nil {
		missing = append(missing, "the CNI plugins (bridge, host-local, loopback)")
	}
	for _, f := range []string{cluster.KubeletBinary, cluster.NodeImagesFile} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			missing = append(missing, filepath.Join(bin, f))
		}
	}
	root := os.Geteuid() == 0
	switch {
	case len(missing) > 0 && !root:
		return fmt.Errorf("missing %s, and not root: run `make tools-node` and the demo as root", strings.Join(missing, ", "))
	case len(missing) > 0:
		return fmt.Errorf("missing %s: run `make tools-node`", strings.Join(missing, ", "))
	case !root:
		return errors.New("it runs containers and needs root: run the demo as root")
	}
	return nil
}

// realNodeIfPossible starts the real node and its workloads where the
// machine can run them, and says how to use them. Where it cannot, or the
// node fails to start, it says why and returns neither node nor error: the
// demo goes on without it. It fails only when ctx ends.
func realNodeIfPossible(ctx context.Context, c *cluster.Cluster, root, bin, lwsModuleDir string) (*cluster.RealNode, error) {
	if why := realNodeMissing(bin); why != nil {
		fmt.Printf("\nReal node: not started, the demo goes on without it: %v\n", why)
		return nil, nil
	}
	n, err := startRealNode(ctx, c, lwsModuleDir)
	switch {
	case err == nil:
		printRealNode(c, n, root, lwsModuleDir)
		return n, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	fmt.Printf("\nReal node: could not start, the demo goes on without it: %v\n(logs: %s)\n", err, c.LogDir())
	return nil, nil
}

// stopRealNode stops n, saying so.
func stopRealNode(n *cluster.RealNode) {
	fmt.Printf("Stopping the real node %s ...\n", n.Name())
	if err := n.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: stop the real node: %v\n", err)
	}
}

// startRealNode starts the real node and its workloads (deployRealNode).
// On error nothing of the node is left.
func startRealNode(ctx context.Context, c *cluster.Cluster, lwsModuleDir string) (*cluster.RealNode, error) {
	ctx, cancel := context.WithTimeout(ctx, realNodeTimeout)
	defer cancel()
	fmt.Println("Starting the real node (containerd and a kubelet) ...")
	n, err := c.StartRealNode(ctx, cluster.RealNodeOptions{})
	if err != nil {
		return nil, err
	}
	if err := deployRealNode(ctx, c, n, lwsModuleDir); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	return n, nil
}

// deployRealNode creates realNS, annotated to keep its pods on n, with
// the web Deployment and the LWS sample and its HPA, and waits until they
// run, kubectl top shows them and n, and lws-hpa reads a utilization.
func deployRealNode(ctx context.Context, c *cluster.Cluster, n *cluster.RealNode, lwsModuleDir string) error {
	if err := createNamespaceOn(ctx, c, realNS, n.OnlyHere()); err != nil {
		return err
	}
	if _, err := c.Client().AppsV1().Deployments(realNS).Create(ctx, realWebDeployment(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create deployment %s/%s: %w", realNS, realWeb, err)
	}
	sample := filepath.Join(lwsModuleDir, "docs", "examples", "sample")
	fmt.Printf("Applying %s/{lws,horizontal-pod-autoscaler}.yaml in namespace %s ...\n", sample, realNS)
	if _, _, err := c.Kubectl(ctx, "apply", "-n", realNS,
		"-f", filepath.Join(sample, "lws.yaml"), "-f", filepath.Join(sample, "horizontal-pod-autoscaler.yaml")); err != nil {
		return err
	}
	web := labels.SelectorFromSet(labels.Set{"app": realWeb})
	if _, err := env.WaitForRunningPods(ctx, c.Client(), realNS, web, realWebReplicas); err != nil {
		return err
	}
	sel, err := labels.Parse(lws.PodSelector(lwsSample))
	if err != nil {
		return err
	}
	if _, err := env.WaitForRunningPods(ctx, c.Client(), realNS, sel, lwsSamplePods); err != nil {
		return err
	}
	if err := cluster.Poll(ctx, "kubectl top to show node "+n.Name()+" and the pods on it", n.Processes(), func(ctx context.Context) error {
		nodes, _, err := c.Kubectl(ctx, "top", "nodes")
		if err != nil {
			return err
		}
		if !strings.Contains(nodes, n.Name()) {
			return fmt.Errorf("no node %s yet:\n%s", n.Name(), nodes)
		}
		pods, _, err := c.Kubectl(ctx, "top", "pods", "-n", realNS)
		if err != nil {
			return err
		}
		if got := strings.Count(pods, realWeb+"-") + strings.Count(pods, lwsSample+"-"); got < realWebReplicas+lwsSamplePods {
			return fmt.Errorf("%d of %d pods yet:\n%s", got, realWebReplicas+lwsSamplePods, pods)
		}
		return nil
	}); err != nil {
		return err
	}
	return waitForUtilization(ctx, c, "HPA "+lwsSampleHPA, realNS, lwsSampleHPA, n.Processes())
}

// waitForUtilization waits until the HPA namespace/name, described as what,
// reads a utilization, failing early when a process of watch exits.
func waitForUtilization(ctx context.Context, c *cluster.Cluster, what, namespace, name string, watch []*cluster.Process) error {
	return cluster.Poll(ctx, what+" to read a utilization", watch, func(ctx context.Context) error {
		out, _, err := c.Kubectl(ctx, "get", "hpa", name, "-n", namespace,
			"-o", "jsonpath={.status.currentMetrics[0].resource.current.averageUtilization}")
		if err == nil && out == "" {
			err = errors.New("no utilization yet")
		}
		return err
	})
}

// createNamespaceOn creates namespace with the PodNodeSelector annotation
// nodeSelector, which the admission plugin merges into every pod created
// in it, and waits for its default ServiceAccount.
func createNamespaceOn(ctx context.Context, c *cluster.Cluster, namespace, nodeSelector string) error {
	if err := env.CreateNamespace(ctx, c.Client(), namespace); err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.PodNodeSelectorAnnotation, nodeSelector)
	if _, err := c.Client().CoreV1().Namespaces().Patch(ctx, namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate namespace %s: %w", namespace, err)
	}
	return nil
}

// realWebDeployment is web on the real node: busybox httpd (the workload
// image's default command) requesting 100m CPU, limited to 200m and 32Mi.
func realWebDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": realWeb}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: realWeb, Namespace: realNS, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](realWebReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name:            "httpd",
						Image:           cluster.NodeWorkloadImage,
						ImagePullPolicy: corev1.PullNever, // the node has no registry
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
							Limits: corev1.ResourceList{
								corev1.ResourceCPU:    resource.MustParse("200m"),
								corev1.ResourceMemory: resource.MustParse("32Mi"),
							},
						},
					}},
				},
			},
		},
	}
}

// printRealNode says what runs on the real node and how to load it.
func printRealNode(c *cluster.Cluster, n *cluster.RealNode, root, lwsModuleDir string) {
	fmt.Printf(`
Real node: %[1]s is a kubelet and containerd on this machine running real
containers. Namespace %[2]s keeps its pods there (its annotation
%[3]s: %[4]s):
Deployment %[5]s, %[6]d pods of busybox httpd (100m CPU requested, 200m limit),
and the LeaderWorkerSet project's sample %[7]s, 3 groups of 4
(50m requested, 100m limit each), with its HPA %[8]s (3 to 5 groups at 50%%
of the leaders' requests), applied as published from
%[9]s.

  %[10]s top nodes          # %[1]s beside the fake nodes
  %[10]s top pods -n %[2]s   # real usage of real containers
  %[10]s get hpa %[8]s -n %[2]s -w

Burn CPU in a leader (up to its 100m limit: within about 20 s the HPA adds a
group), then stop the burn (the HPA takes the group away). Keep the 2>&1: a
yes holding the exec's stderr keeps kubectl exec waiting.

  %[10]s exec -n %[2]s %[7]s-0 -- /bin/sh -c "for i in \$(seq 1 4); do yes > /dev/null 2>&1 & done"
  %[10]s exec -n %[2]s %[7]s-0 -- killall yes

Ctrl-C stops the real node first: its containers, mounts and bridge go; its
logs stay in %[11]s (kubelet-%[1]s.log, containerd-%[1]s.log).
`, n.Name(), realNS, cluster.PodNodeSelectorAnnotation, n.OnlyHere(), realWeb, realWebReplicas,
		lwsSample, lwsSampleHPA, filepath.Join(lwsModuleDir, "docs", "examples", "sample"), kubectlPath(c, root), c.LogDir())
}
