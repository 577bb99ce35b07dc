package cluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// Binaries and files of a real node: the kubelet in Options.BinDir (make
// tools-node) and NodeImagesFile beside it, the tar of the OCI layout
// hack/image/nodeimage writes; containerd, ctr and runc on the PATH.
const (
	KubeletBinary  = "kubelet"
	NodeImagesFile = "node-images.oci.tar"
)

// The images NodeImagesFile holds (hack/image/nodeimage/main.go names them):
// the sandbox image, and a static busybox with every applet in /bin whose
// default command serves HTTP on port 80, also named
// docker.io/library/nginx:1.14.2 and docker.io/nginxinc/nginx-unprivileged:1.27
// (port 8080), the images of the LeaderWorkerSet project's examples. Pods
// use them with imagePullPolicy Never or IfNotPresent: there is no registry.
const (
	NodePauseImage    = "gms.local/pause:1"
	NodeWorkloadImage = "gms.local/workload:1"
)

// taintUninitialized is the taint a kubelet with --cloud-provider=external
// registers its node with until a cloud controller initializes it
// (k8s.io/cloud-provider api.TaintExternalCloudProvider).
const taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

// RealNodeLabel is on every real node, to tell it from the kwok nodes.
const RealNodeLabel = "gms.local/real-node"

// RealNodeOptions configures StartRealNode; zero values take the defaults.
type RealNodeOptions struct {
	// Name is the node's name; default "real-node".
	Name string
	// KubeletBinary and Images default to Options.BinDir's kubelet and
	// NodeImagesFile.
	KubeletBinary, Images string
	// CNIBinDir holds the bridge, host-local and loopback plugins; default
	// FindCNIBinDir's.
	CNIBinDir string
	// StartTimeout bounds StartRealNode; default 2 minutes.
	StartTimeout time.Duration
}

// RealNode is a kubelet and a containerd registered with the cluster as a
// node: pods bound to it run as real containers. Stop it before the cluster.
type RealNode struct {
	c      *Cluster
	name   string
	dirs   nodeDirs
	bridge string
	port   int

	containerd, kubelet *Process
}

// apiserverKubeletClient is the user of kube-apiserver's kubelet client
// certificate (pki.go); ensureKubeletAPIAdmin lets it use the kubelet API.
const apiserverKubeletClient = "kube-apiserver-kubelet-client"

// StartRealNode starts containerd and a kubelet whose node joins the cluster,
// and returns once the node is Ready with InternalIP 127.0.0.1.
//
// containerd keeps its root, state and socket under <workdir>/nodes/<name>/;
// the images come from the node's OCI layout tar, imported with ctr. The
// kubelet refuses a loopback --node-ip, so it runs with
// --cloud-provider=external and StartRealNode plays the cloud controller:
// it sets the node's addresses (InternalIP 127.0.0.1, Hostname localhost)
// and removes the uninitialized taint. The kubelet's serving certificate is
// the cluster CA's, for 127.0.0.1 and localhost; it authenticates and
// authorizes requests through kube-apiserver (TokenReview,
// SubjectAccessReview). On error, what was started is stopped and cleaned up.
func (c *Cluster) StartRealNode(ctx context.Context, opts RealNodeOptions) (*RealNode, error) {
	opts.Name = cmp.Or(opts.Name, "real-node")
	opts.KubeletBinary = cmp.Or(opts.KubeletBinary, filepath.Join(c.opts.BinDir, KubeletBinary))
	opts.Images = cmp.Or(opts.Images, filepath.Join(c.opts.BinDir, NodeImagesFile))
	opts.StartTimeout = cmp.Or(opts.StartTimeout, 2*time.Minute)
	if opts.CNIBinDir == "" {
		var err error
		if opts.CNIBinDir, err = FindCNIBinDir(); err != nil {
			return nil, err
		}
	}
	if err := checkNodeBinaries(opts); err != nil {
		return nil, err
	}
	// A bridge of its own, named by work directory and node so that suites
	// on one machine do not share one; at most 15 characters.
	sum := sha256.Sum256([]byte(c.workDir + "/" + opts.Name))
	n := &RealNode{c: c, name: opts.Name, dirs: nodeDirs{base: filepath.Join(c.workDir, "nodes", opts.Name)},
		bridge: "gms" + hex.EncodeToString(sum[:5])}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := n.start(ctx, opts); err != nil {
		return nil, errors.Join(fmt.Errorf("start real node %s: %w", n.name, err), n.Stop())
	}
	return n, nil
}

// FindCNIBinDir returns the first of /usr/lib/cni (Debian's
// containernetworking-plugins) and /opt/cni/bin that holds the bridge,
// host-local and loopback plugins.
func FindCNIBinDir() (string, error) {
	for _, dir := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if !slices.ContainsFunc([]string{"bridge", "host-local", "loopback"}, func(p string) bool {
			_, err := os.Stat(filepath.Join(dir, p))
			return err != nil
		}) {
			return dir, nil
		}
	}
	return "", errors.New("no CNI bridge, host-local and loopback plugins in /usr/lib/cni or /opt/cni/bin (hack/node-deps.sh installs them)")
}

// checkNodeBinaries reports everything missing, not only the first.
func checkNodeBinaries(opts RealNodeOptions) error {
	var errs []error
	for _, f := range []string{opts.KubeletBinary, opts.Images} {
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%w (make tools-node builds it)", err))
		}
	}
	for _, b := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(b); err != nil {
			errs = append(errs, fmt.Errorf("%w (hack/node-deps.sh installs it)", err))
		}
	}
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("a real node runs containers and needs root"))
	}
	return errors.Join(errs...)
}

func (n *RealNode) start(ctx context.Context, opts RealNodeOptions) error {
	if err := os.RemoveAll(n.dirs.base); err != nil {
		return err
	}
	for _, d := range []string{n.dirs.containerdRoot(), n.dirs.containerdState(), n.dirs.cniConfDir(),
		n.dirs.cniDataDir(), n.dirs.kubeletRoot(), n.dirs.podLogs(), n.dirs.path("volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := weightPods(); err != nil {
		return err
	}
	if err := n.startContainerd(ctx, opts); err != nil {
		return err
	}
	if err := n.c.ensureKubeletAPIAdmin(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(opts); err != nil {
		return err
	}
	return n.initialize(ctx)
}

// podsCPUShares is the cpu.shares of the cgroup every pod's cgroup is made
// in (cgroup v1: containerd's CRI parent /k8s.io, the kubelet running
// without QoS cgroups), the most the kernel takes.
//
// On a real node the pods' parent (kubepods) weighs the node's allocatable
// CPU and competes only with the node's daemons. Here the test's control
// planes, servers and builds run beside the node, each busy task weighing
// 1024 against the pods' parent: at the default weight a container
// requesting 100m got a few percent of a core under the e2e suite. At the
// largest weight the pods run first, each within its own CPU limit (every
// pod the tests and the demo put on the node has one), as on a node of
// their own. The cgroup stays while empty until a node's clean-up removes it.
const podsCPUShares = 262144

func weightPods() error {
	dir := "/sys/fs/cgroup/cpu/k8s.io"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("the pods' cgroup: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(fmt.Sprint(podsCPUShares)), 0o644)
}

func (n *RealNode) startContainerd(ctx context.Context, opts RealNodeOptions) error {
	files := map[string]string{
		n.dirs.containerdConfig():                             containerdConfig(n.dirs, NodePauseImage, opts.CNIBinDir),
		filepath.Join(n.dirs.cniConfDir(), "10-gms.conflist"): cniConfig("gms-"+n.name, n.bridge, n.dirs.cniDataDir()),
	}
	for path, text := range files {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	var err error
	n.containerd, err = n.c.StartProcess("containerd-"+n.name, "containerd", "--config="+n.dirs.containerdConfig())
	if err != nil {
		return err
	}
	if err := Poll(ctx, "containerd of "+n.name, []*Process{n.containerd}, func(ctx context.Context) error {
		_, err := n.Ctr(ctx, "version")
		return err
	}); err != nil {
		return err
	}
	// The sandbox image, the workload image and its other names, unpacked
	// into the overlayfs snapshotter the CRI plugin uses.
	if _, err := n.Ctr(ctx, "images", "import", "--all-platforms", opts.Images); err != nil {
		return err
	}
	out, err := n.Ctr(ctx, "images", "list", "-q")
	if err != nil {
		return err
	}
	for _, want := range []string{NodePauseImage, NodeWorkloadImage} {
		if !slices.Contains(strings.Fields(out), want) {
			return fmt.Errorf("%s holds no image %s (images: %s)", opts.Images, want, strings.Join(strings.Fields(out), " "))
		}
	}
	return nil
}

// Ctr runs ctr against the node's containerd in the CRI plugin's namespace,
// k8s.io, and returns its output.
func (n *RealNode) Ctr(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--address=" + n.dirs.containerdSocket(), "--namespace=k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, "ctr", full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (n *RealNode) startKubelet(opts RealNodeOptions) error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	n.port = ports[0]
	certFile, keyFile, err := n.c.IssueServingCert("kubelet-"+n.name, loopback, "localhost", n.name)
	if err != nil {
		return err
	}
	// The node's identity, as kubeadm's kubelet.conf holds it: the Node
	// authorizer and the NodeRestriction admission plugin know it by name.
	certPEM, keyPEM, err := n.c.pki.ca.Issue(time.Now(), pki.Leaf{
		CommonName: "system:node:" + n.name, Organizations: []string{"system:nodes"}, Client: true,
	})
	if err != nil {
		return err
	}
	user := &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	if err := n.c.writeKubeconfig(n.dirs.kubeconfig(), "system:node:"+n.name, user); err != nil {
		return err
	}
	config := kubeletConfig(n.dirs, n.port, ports[1], n.c.CACertFile(), certFile, keyFile)
	if err := os.WriteFile(n.dirs.kubeletConfig(), []byte(config), 0o644); err != nil {
		return err
	}
	n.kubelet, err = n.c.StartProcess("kubelet-"+n.name, opts.KubeletBinary,
		"--config="+n.dirs.kubeletConfig(), "--kubeconfig="+n.dirs.kubeconfig(), "--root-dir="+n.dirs.kubeletRoot(),
		"--cert-dir="+n.dirs.path("kubelet-pki"), "--hostname-override="+n.name, "--node-labels="+RealNodeLabel+"=true",
		"--cloud-provider=external", "--v=2")
	return err
}

// initialize does what a cloud controller does for a new node, then waits
// for it to be Ready.
func (n *RealNode) initialize(ctx context.Context) error {
	nodes := n.c.client.CoreV1().Nodes()
	watch := append(n.c.coreProcesses(), n.containerd, n.kubelet)
	if err := Poll(ctx, "node "+n.name+" to register", watch, func(ctx context.Context) error {
		_, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	// The kubelet keeps addresses it finds when it has no --node-ip and an
	// external cloud provider (k8s.io/kubernetes
	// pkg/kubelet/nodestatus/setters.go, NodeAddress).
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":%q,"address":%q},{"type":%q,"address":"localhost"}]}}`,
		corev1.NodeInternalIP, loopback, corev1.NodeHostName)
	if _, err := nodes.Patch(ctx, n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("set the addresses of node %s: %w", n.name, err)
	}
	if err := Poll(ctx, "the uninitialized taint off node "+n.name, watch, func(ctx context.Context) error {
		node, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
			return t.Key == taintUninitialized
		})
		if len(taints) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		if _, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err == nil {
			err = errors.New("taint removed, checking again")
		}
		return err
	}); err != nil {
		return err
	}
	return Poll(ctx, "node "+n.name+" to be Ready at "+loopback, watch, func(ctx context.Context) error {
		node, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case !slices.Contains(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: loopback}):
			return fmt.Errorf("node %s has addresses %v", n.name, node.Status.Addresses)
		case !NodeReady(node):
			return fmt.Errorf("node %s is not Ready yet", n.name)
		}
		return nil
	})
}

// ensureKubeletAPIAdmin binds kube-apiserver's kubelet client to the
// bootstrap ClusterRole system:kubelet-api-admin (nodes/proxy, log, stats,
// metrics), as kubeadm does, so the kubelet's webhook authorization lets
// kubectl exec and logs through.
func (c *Cluster) ensureKubeletAPIAdmin(ctx context.Context) error {
	_, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gms:" + apiserverKubeletClient},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: apiserverKubeletClient}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Name is the node's name; Port the kubelet's port on 127.0.0.1.
func (n *RealNode) Name() string { return n.name }
func (n *RealNode) Port() int    { return n.port }

// KubeletURL is https://127.0.0.1:<port>, the kubelet's API; its serving
// certificate is the cluster CA's (CACertFile).
func (n *RealNode) KubeletURL() string { return "https://" + hostPort(n.port) }

// Processes are containerd and the kubelet, for waits to watch.
func (n *RealNode) Processes() []*Process {
	return slices.DeleteFunc([]*Process{n.containerd, n.kubelet}, func(p *Process) bool { return p == nil })
}

// PodNodeSelectorAnnotation on a namespace is the node selector the
// PodNodeSelector admission plugin, which the cluster's kube-apiserver runs,
// merges into every pod created in it (k8s.io/kubernetes
// plugin/pkg/admission/podnodeselector).
const PodNodeSelectorAnnotation = "scheduler.alpha.kubernetes.io/node-selector"

// OnlyHere returns the value of PodNodeSelectorAnnotation that keeps a
// namespace's pods on n.
func (n *RealNode) OnlyHere() string { return corev1.LabelHostname + "=" + n.name }
