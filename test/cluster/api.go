package cluster

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
)

// defaultWaitTimeout bounds waits whose context has no deadline.
const defaultWaitTimeout = 2 * time.Minute

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultWaitTimeout)
}

// Kubectl runs bin/kubectl with the admin kubeconfig and returns its stdout
// and stderr. A non-zero exit is an error that includes stderr.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	full := append([]string{
		"--kubeconfig=" + c.adminKubeconfig,
		"--cache-dir=" + filepath.Join(c.workDir, "kubectl-cache"),
	}, args...)
	cmd := exec.CommandContext(ctx, c.BinaryPath(KubectlBinary), full...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err = cmd.Run(); err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), err
}

// nodeResources are every NodeObject's capacity: far more than tests schedule.
var nodeResources = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("64"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("250"),
}

// AddNode creates NodeObject(name, labels, kubeletAddr, kubeletPort) and
// waits until kwok has made it Ready, so that a metrics scraper reaches the
// node's "kubelet" at kubeletAddr (127.0.0.1 when empty; a loopback IP, so no
// scrape leaves the machine):kubeletPort. If ctx has no deadline the wait is
// bounded by two minutes. It is safe to call concurrently, which is how to add
// many nodes quickly.
func (c *Cluster) AddNode(ctx context.Context, name string, labels map[string]string, kubeletAddr string, kubeletPort int) error {
	kubeletAddr = cmp.Or(kubeletAddr, loopback)
	if ip := net.ParseIP(kubeletAddr); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("node %s: kubelet address %q is not a loopback IP", name, kubeletAddr)
	}
	if kubeletPort <= 0 || kubeletPort > 65535 {
		return fmt.Errorf("node %s: kubelet port %d out of range", name, kubeletPort)
	}
	return c.CreateNode(ctx, NodeObject(name, labels, kubeletAddr, kubeletPort))
}

// CreateNode creates node, a NodeObject changed as a test needs, and waits
// as AddNode does until kwok has made it Ready.
func (c *Cluster) CreateNode(ctx context.Context, node *corev1.Node) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	return Poll(ctx, "node "+node.Name+" to be Ready", c.coreProcesses("kwok"), func(ctx context.Context) error {
		n, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err == nil && !NodeReady(n) {
			err = fmt.Errorf("node %s is not Ready yet", node.Name)
		}
		return err
	})
}

// NodeReady says whether n has the condition Ready=True.
func NodeReady(n *corev1.Node) bool {
	_, c := nodeutil.GetNodeCondition(&n.Status, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// NodeObject is the Node AddNode creates: kwok-managed, with the usual
// kubernetes.io/hostname, os and arch labels and labels, nodeResources,
// InternalIP kubeletAddr and kubeletPort as its kubelet endpoint.
func NodeObject(name string, labels map[string]string, kubeletAddr string, kubeletPort int) *corev1.Node {
	nodeLabels := map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", "type": "kwok",
	}
	maps.Copy(nodeLabels, labels)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      nodeLabels,
			Annotations: map[string]string{KwokNodeAnnotation: KwokNodeAnnotationValue},
		},
		Status: corev1.NodeStatus{
			Capacity:    nodeResources.DeepCopy(),
			Allocatable: nodeResources.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: kubeletAddr},
				{Type: corev1.NodeHostName, Address: name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(kubeletPort)}},
		},
	}
}

// coreProcesses returns etcd, kube-apiserver and the named extra processes
// that exist, for waits to watch.
func (c *Cluster) coreProcesses(extra ...string) []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := append([]string{"etcd", "kube-apiserver"}, extra...)
	return slices.DeleteFunc(slices.Clone(c.procs), func(p *Process) bool { return !slices.Contains(names, p.name) })
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates with a
// token of the ServiceAccount namespace/name, valid for seven days, and
// returns its path, <workdir>/kubeconfigs/sa-<namespace>-<name>.kubeconfig.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(7 * 24 * 3600))}}
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s: %w", namespace, name, err)
	}
	path := c.kubeconfigPath("sa-" + namespace + "-" + name)
	user := "system:serviceaccount:" + namespace + ":" + name
	return path, c.writeKubeconfig(path, user, &clientcmdapi.AuthInfo{Token: tr.Status.Token})
}

// APIServices is the admin's client of apiregistration.k8s.io/v1 APIServices.
func (c *Cluster) APIServices() dynamic.ResourceInterface {
	return c.dynamic.Resource(certs.APIServiceResource)
}

// WaitForAPIServiceAvailable waits until the APIService name (for example
// v1beta1.metrics.k8s.io) is Available, for at most two minutes if ctx has no
// deadline. The error carries the aggregator's last reason and message.
func (c *Cluster) WaitForAPIServiceAvailable(ctx context.Context, name string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	return Poll(ctx, "APIService "+name+" to be Available", c.coreProcesses(), func(ctx context.Context) error {
		obj, err := c.APIServices().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			err = ConditionTrue(obj, "Available")
		}
		return err
	})
}

// ConditionTrue returns nil if obj has the status condition condType=True,
// and otherwise an error with the reason and message obj reports.
func ConditionTrue(obj *unstructured.Unstructured, condType string) error {
	var status struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	raw, _, _ := unstructured.NestedMap(obj.Object, "status")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status); err != nil {
		return fmt.Errorf("read %s %s conditions: %w", obj.GetKind(), obj.GetName(), err)
	}
	switch cond := meta.FindStatusCondition(status.Conditions, condType); {
	case cond == nil:
		return fmt.Errorf("%s %s has no %s condition yet", obj.GetKind(), obj.GetName(), condType)
	case cond.Status != metav1.ConditionTrue:
		return fmt.Errorf("%s %s is not %s: %s: %s", obj.GetKind(), obj.GetName(), condType, cond.Reason, cond.Message)
	}
	return nil
}
