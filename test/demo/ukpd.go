package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

const (
	ukpdBinary   = "fake-ukpd"
	kraftletNode = "kraftlet-0"
	unikraftNS   = "unikraft"
	ukpdToken    = "demo-ukpd-token"
)

// unikernels is the demo's kraftlet side: a fake ukpd process, a kraftlet
// node with no kubelet behind it, and a Deployment of unikernel pods on that
// node whose instances the fake reports.
type unikernels struct {
	// state is the fake's ukpd.json.
	state     *fakeukpd.State
	tokenFile string
	// serverArgs add the ukpd source, with the fake as its endpoint.
	serverArgs []string
}

// startUnikernels builds and runs fake-ukpd with its control API, adds the
// kraftlet node, keeps an instance for each container of the node's Running
// pods for as long as runCtx lasts, and creates a Deployment of three pods
// there with an HPA. Waits are bounded by ctx.
func startUnikernels(ctx, runCtx context.Context, c *cluster.Cluster, root, bin string, o options) (*unikernels, error) {
	fmt.Println("Building and starting the fake ukpd ...")
	if err := goBuild(ctx, root, bin, ukpdBinary, "./test/fakeukpd/cmd/fake-ukpd"); err != nil {
		return nil, err
	}
	dir := filepath.Join(o.dir, "ukpd")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	u := &unikernels{tokenFile: filepath.Join(dir, "token")}
	if err := os.WriteFile(u.tokenFile, []byte(ukpdToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	p, err := c.StartProcess(ukpdBinary, filepath.Join(bin, ukpdBinary),
		"--token-file="+u.tokenFile,
		"--tls-cert-dir="+dir,
	)
	if err != nil {
		return nil, err
	}
	err = cluster.Poll(ctx, "the fake ukpd to write ukpd.json", []*cluster.Process{p}, func(context.Context) error {
		state, err := fakecore.ReadState[fakeukpd.State](filepath.Join(dir, "ukpd.json"))
		u.state = state
		return err
	})
	if err != nil {
		return nil, err
	}
	u.serverArgs = []string{
		"--sources=kubelet,ukpd",
		"--ukpd-endpoint=" + u.state.URL,
		"--ukpd-token-file=" + u.tokenFile,
		"--ukpd-certificate-authority=" + u.state.CAFile,
	}

	fmt.Printf("Adding the kraftlet node %s and unikernel pods in namespace %s ...\n", kraftletNode, unikraftNS)
	if err := env.AddKraftletNode(ctx, c, kraftletNode); err != nil {
		return nil, err
	}
	control := env.UkpdControl{Address: u.state.ControlAddress}
	if _, err := env.SyncInstances(runCtx, c.Client(), kraftletNode, control, env.UkpdUsage{CPU: "50m", Memory: "32Mi"}); err != nil {
		return nil, err
	}
	if err := env.CreateNamespace(ctx, c.Client(), unikraftNS); err != nil {
		return nil, err
	}
	spec := env.DeploymentSpec{Namespace: unikraftNS, Name: "unikernel", Replicas: 3, CPURequest: "100m"}
	if err := env.CreateKraftletDeployment(ctx, c.Client(), spec); err != nil {
		return nil, err
	}
	if err := env.CreateCPUHPA(ctx, c.Client(), unikraftNS, spec.Name, 1, 6, 50); err != nil {
		return nil, err
	}
	_, err = env.WaitForRunningPods(ctx, c.Client(), unikraftNS, spec.Selector(), int(spec.Replicas))
	return u, err
}

// ready waits until kubectl top shows the unikernel pods, then says how to
// drive them.
func (u *unikernels) ready(ctx context.Context, c *cluster.Cluster, root string) error {
	if err := waitForTop(ctx, c, unikraftNS, "unikernel-"); err != nil {
		return err
	}
	kubectl := kubectlPath(c, root)
	ctl := u.state.ControlAddress
	fmt.Printf(`
Unikernel pods: namespace %[1]s runs on %[2]s, a kraftlet-like node with no
kubelet; their usage comes from the fake ukpd at %[3]s
(one instance per container, kept in sync with the pods).

Add load to every unikernel pod (the HPA on unikernel scales up), then take it away:

  for p in $(%[4]s get pods -n %[1]s -o name); do curl -s -X PUT http://%[5]s/v1/namespaces/%[1]s/pods/${p#pod/}/usage -d '{"cpu":"400m"}'; done
  for p in $(%[4]s get pods -n %[1]s -o name); do curl -s -X PUT http://%[5]s/v1/namespaces/%[1]s/pods/${p#pod/}/usage -d '{"cpu":"50m"}'; done

Take the ukpd endpoint down and back (kubelet-backed pods are not affected):

  curl -s -X PUT http://%[5]s/v1/fault -d '{"kind":"Status500"}'
  curl -s -X DELETE http://%[5]s/v1/fault

Read the platform API as the server does:

  curl -s --cacert %[6]s -H "Authorization: Bearer $(cat %[7]s)" -H "Accept: application/json" %[3]s/v1/instances/metrics
`, unikraftNS, kraftletNode, u.state.URL, kubectl, ctl, u.state.CAFile, u.tokenFile)
	return nil
}
