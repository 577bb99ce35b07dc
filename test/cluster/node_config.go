package cluster

import (
	"fmt"
	"path/filepath"
)

// nodeDirs are where one real node keeps everything: containerd's root,
// state and socket, the CNI configuration and address leases, the kubelet's
// root, pod logs and volume plugin directory, and their configuration files.
type nodeDirs struct{ base string }

func (d nodeDirs) path(elem ...string) string {
	return filepath.Join(append([]string{d.base}, elem...)...)
}

func (d nodeDirs) containerdRoot() string   { return d.path("containerd", "root") }
func (d nodeDirs) containerdState() string  { return d.path("containerd", "state") }
func (d nodeDirs) containerdSocket() string { return d.path("containerd", "containerd.sock") }
func (d nodeDirs) containerdConfig() string { return d.path("containerd.toml") }
func (d nodeDirs) runcRoot() string         { return d.path("containerd", "runc") }
func (d nodeDirs) cniConfDir() string       { return d.path("cni", "net.d") }
func (d nodeDirs) cniDataDir() string       { return d.path("cni", "ipam") }
func (d nodeDirs) kubeletRoot() string      { return d.path("kubelet") }
func (d nodeDirs) kubeletConfig() string    { return d.path("kubelet.yaml") }
func (d nodeDirs) kubeconfig() string       { return d.path("kubelet.kubeconfig") }
func (d nodeDirs) podLogs() string          { return d.path("pod-logs") }

// NodePodCIDR is the range the real node's pods take their addresses from:
// a loopback range, like the Service and kwok pod ranges, and a bridge with
// no gateway and no masquerading, so each pod has an address in its own
// network namespace and no route off the machine.
const NodePodCIDR = "127.17.0.0/16"

// containerdConfig is containerd 1.6's configuration (version 2) for one
// node, every path under the node's directory:
//   - the CRI plugin on CRI v1, which kubelet v1.37 speaks, with the sandbox
//     image the node imports (the runtime never pulls);
//   - restrict_oom_score_adj: without CAP_SYS_RESOURCE runc cannot lower a
//     container's oom_score_adj below its own, and every sandbox fails with
//     "can't get final child's PID from pipe: EOF"; with it, the runtime
//     clamps the kubelet's value to the one it may set;
//   - network namespaces (netns_mounts_under_state_dir) and runc's state
//     (the runtime options' Root) under the node, where Stop finds them;
//   - the CRI streaming server (exec, logs, port-forward) on 127.0.0.1 with
//     a port the kernel picks; no TCP gRPC, metrics or debug listeners.
func containerdConfig(d nodeDirs, sandboxImage, cniBinDir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[5]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
    max_conf_num = 1

[plugins."io.containerd.internal.v1.opt"]
  path = %[8]q
`, d.containerdRoot(), d.containerdState(), d.containerdSocket(), sandboxImage, d.runcRoot(),
		cniBinDir, d.cniConfDir(), d.path("containerd", "opt"))
}

// cniConfig is the pod network of one node: the bridge plugin on a bridge of
// its own with host-local addresses from NodePodCIDR, without a gateway
// address, default route or IP masquerading, so nothing a pod sends can be
// routed off the machine. containerd's CRI plugin brings up the pods'
// loopback interface itself with the loopback plugin from the same directory.
func cniConfig(network, bridge, dataDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "dataDir": %q
      }
    }
  ]
}
`, network, bridge, NodePodCIDR, dataDir)
}

// kubeletConfig is the KubeletConfiguration of one node.
//
// What this machine needs (cgroup v1 only, no CAP_SYS_RESOURCE):
// failCgroupV1 false, or kubelet v1.35+ refuses to start; the cgroupfs
// driver; no QoS cgroup hierarchy nor node allocatable enforcement, which
// need cgroups above the containers; failSwapOn false. Without the QoS
// hierarchy pods get no cgroup parent (pkg/kubelet/cm/
// pod_container_manager_linux.go, podContainerManagerNoop), and containerd
// puts each container in /k8s.io/<id> of every hierarchy. Disk eviction and
// image garbage collection are off: cAdvisor cannot stat the overlay
// snapshotter's filesystem here, and a fuller disk than the defaults allow
// would taint the node.
//
// What users of metrics-server run: webhook authentication (TokenReview)
// and client certificates from clientCAFile, anonymous off, and webhook
// authorization, so a scraper needs nodes/stats (nodes/metrics for
// /metrics/resource) in RBAC; a serving certificate from the test CA; the
// read-only port off. Everything listens on 127.0.0.1.
func kubeletConfig(d nodeDirs, port, healthzPort int, clientCAFile, certFile, keyFile string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
containerRuntimeEndpoint: %q
podLogsDir: %q
volumePluginDir: %q
staticPodPath: ""
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
resolvConf: ""
clusterDomain: cluster.local
registerNode: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
`, port, healthzPort, certFile, keyFile, clientCAFile, "unix://"+d.containerdSocket(), d.podLogs(),
		d.path("volume-plugins"))
}
