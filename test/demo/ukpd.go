package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

const (
	kraftletNode = "kraftlet-0"
	unikraftNS   = "unikraft"
)

// startUnikernels is the demo's kraftlet side: it starts a fake ukpd, adds
// the kraftlet node (no kubelet behind it), keeps an instance for each
// container of the node's Running pods for as long as runCtx lasts, and
// creates a Deployment of three pods there with an HPA. Waits are bounded by
// ctx. Close the fake when done.
func startUnikernels(ctx, runCtx context.Context, c *cluster.Cluster, o options) (*env.Ukpd, error) {
	fmt.Println("Starting the fake ukpd ...")
	u, err := env.StartUkpd(filepath.Join(o.dir, "ukpd"))
	if err != nil {
		return nil, err
	}
	fmt.Printf("Adding the kraftlet node %s and unikernel pods in namespace %s ...\n", kraftletNode, unikraftNS)
	if err := env.AddKraftletNode(ctx, c, kraftletNode); err != nil {
		return nil, err
	}
	if _, err := env.SyncInstances(runCtx, c.Client(), kraftletNode, u.Control, env.UkpdUsage{CPU: "50m", Memory: "32Mi"}); err != nil {
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

// unikernelsReady waits until kubectl top shows the unikernel pods, then
// says how to drive them.
func unikernelsReady(ctx context.Context, c *cluster.Cluster, u *env.Ukpd, root string) error {
	if err := waitForTop(ctx, c, unikraftNS, "unikernel-"); err != nil {
		return err
	}
	kubectl := kubectlPath(c, root)
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
`, unikraftNS, kraftletNode, u.URL, kubectl, u.ControlAddress, u.CAFile, u.TokenFile)
	return nil
}
