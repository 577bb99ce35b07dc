package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

const (
	lwsNS = "demo-lws"
	// lwsName is the LeaderWorkerSet of manifests/examples/lws-group-hpa.
	lwsName = "web-group"
	// lwsGroupSize is that example's group size.
	lwsGroupSize = 4
)

// startLWS installs the LeaderWorkerSet controller, applies
// manifests/examples/lws-group-hpa (an LWS in the group policy and an HPA on
// it) into lwsNS with the fleet reporting every pod at 10m, waits until its
// group runs and the HPA reads a utilization, and says how to load the
// workers. It returns the directory of the controller's module,
// sigs.k8s.io/lws.
func startLWS(ctx context.Context, c *cluster.Cluster, root, bin, control string) (string, error) {
	fmt.Println("Installing the LeaderWorkerSet controller ...")
	ctrl, err := lws.Install(ctx, c, bin)
	if err != nil {
		return "", err
	}
	// The fleet plays the kubelet of the fake nodes (cluster.NodeObject
	// labels them type=kwok) only: the groups the HPA adds must not land
	// on the real node.
	if err := createNamespaceOn(ctx, c, lwsNS, "type=kwok"); err != nil {
		return "", err
	}
	pods := labels.SelectorFromSet(labels.Set{group.LabelName: lwsName})
	workers := pods.String() + "," + group.LabelWorkerIndex + "!=0"
	usage := func(selector, cpu string) string {
		return fmt.Sprintf(`{"namespace":%q,"selector":%q,"cpu":%q,"memory":"64Mi"}`, lwsNS, selector, cpu)
	}
	if err := controlPut(ctx, control, "/v1/usage", json.RawMessage(usage(pods.String(), "10m"))); err != nil {
		return "", err
	}
	example := filepath.Join(root, "manifests", "examples", "lws-group-hpa")
	fmt.Printf("Applying %s in namespace %s ...\n", example, lwsNS)
	if _, _, err := c.Kubectl(ctx, "apply", "-k", example, "-n", lwsNS); err != nil {
		return "", err
	}
	if _, err := env.WaitForRunningPods(ctx, c.Client(), lwsNS, pods, lwsGroupSize); err != nil {
		return "", err
	}
	if err := waitForUtilization(ctx, c, "the HPA on the LeaderWorkerSet", lwsNS, lwsName, nil); err != nil {
		return "", err
	}

	kubectl := kubectlPath(c, root)
	fmt.Printf(`
LeaderWorkerSet: %[1]s/%[2]s runs groups of %[3]d pods; its leaders report their
group's CPU utilization (group policy), so its HPA scales on the workers' load
although the scale selector matches the leaders only (docs/lws-autoscaling.md).

  %[4]s get hpa,lws,pods -n %[1]s
  %[4]s get --raw /apis/metrics.k8s.io/v1beta1/namespaces/%[1]s/pods/%[2]s-0

Load the workers only (the HPA adds groups), then take the load away:

  curl -s -X PUT http://%[5]s/v1/usage -d '%[6]s'
  curl -s -X PUT http://%[5]s/v1/usage -d '%[7]s'
`, lwsNS, lwsName, lwsGroupSize, kubectl, control, usage(workers, "200m"), usage(workers, "10m"))
	return ctrl.ModuleDir(), nil
}
