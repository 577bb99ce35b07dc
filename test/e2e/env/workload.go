package env

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// CreateNamespace creates a namespace and waits for its default
// ServiceAccount, without which pods are not admitted.
func CreateNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return cluster.Poll(ctx, "default ServiceAccount in "+name, nil, func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// DeploymentSpec describes a Deployment made by CreateDeployment.
type DeploymentSpec struct {
	Namespace, Name string
	Replicas        int32
	// Containers are the container names; default one named "app".
	Containers []string
	// CPURequest is each container's CPU request, e.g. "100m"; none if empty.
	CPURequest string
	// MemoryLimit is each container's memory limit; none if empty.
	MemoryLimit string
	// Image, NodeSelector and Toleration, if set, replace those the
	// Create functions give the pods.
	Image        string
	NodeSelector map[string]string
	Toleration   *corev1.Toleration
}

// Labels returns the pod labels of the Deployment, app=<name>, and
// Selector returns them as a selector.
func (d DeploymentSpec) Labels() map[string]string { return map[string]string{"app": d.Name} }

func (d DeploymentSpec) Selector() labels.Selector { return labels.SelectorFromSet(d.Labels()) }

// CreateDeployment creates a Deployment whose pods kwok runs on the fake
// nodes.
func CreateDeployment(ctx context.Context, client kubernetes.Interface, d DeploymentSpec) error {
	return createDeployment(ctx, client, d, "registry.k8s.io/pause:3.10", map[string]string{"type": "kwok"}, corev1.Toleration{
		Key: cluster.KwokNodeAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
	})
}

// createDeployment creates d's Deployment, its containers of image, its
// pods pinned to the nodes nodeSelector selects, tolerating toleration.
func createDeployment(ctx context.Context, client kubernetes.Interface, d DeploymentSpec, image string, nodeSelector map[string]string, toleration corev1.Toleration) error {
	names := d.Containers
	if len(names) == 0 {
		names = []string{"app"}
	}
	if d.NodeSelector != nil {
		nodeSelector = d.NodeSelector
	}
	if d.Toleration != nil {
		toleration = *d.Toleration
	}
	pod := corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0), NodeSelector: nodeSelector, Tolerations: []corev1.Toleration{toleration}}
	for _, n := range names {
		ctr := corev1.Container{Name: n, Image: cmp.Or(d.Image, image)}
		if d.CPURequest != "" {
			ctr.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(d.CPURequest)}
		}
		if d.MemoryLimit != "" {
			ctr.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(d.MemoryLimit)}
		}
		pod.Containers = append(pod.Containers, ctr)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: d.Labels()},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(d.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: d.Labels()},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: d.Labels()}, Spec: pod},
		},
	}
	if _, err := client.AppsV1().Deployments(d.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// CreateCPUHPA creates an autoscaling/v2 HPA on the Deployment name that
// targets an average CPU utilization of targetPercent.
func CreateCPUHPA(ctx context.Context, client kubernetes.Interface, namespace, name string, minReplicas, maxReplicas, targetPercent int32) error {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To(minReplicas),
			MaxReplicas:    maxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name:   corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(targetPercent)},
			}}},
		},
	}
	if _, err := client.AutoscalingV2().HorizontalPodAutoscalers(namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create hpa %s/%s: %w", namespace, name, err)
	}
	return nil
}

// WaitForRunningPods waits until exactly n pods in namespace matching
// selector are Running, and returns them.
func WaitForRunningPods(ctx context.Context, client kubernetes.Interface, namespace string, selector labels.Selector, n int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := cluster.Poll(ctx, fmt.Sprintf("%d Running pods %s in %s", n, selector, namespace), nil, func(ctx context.Context) error {
		list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return err
		}
		pods = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
			return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil
		})
		if len(pods) != n {
			return fmt.Errorf("%d Running", len(pods))
		}
		return nil
	})
	return pods, err
}

// FleetConfig configures StartFleet: Nodes fake nodes named fake-node-<i>
// (default 3), each using NodeBaseUsage beyond its pods.
type FleetConfig struct {
	Nodes         int
	NodeBaseUsage fakekubelet.Usage
}

// Fleet is an in-process fake kubelet fleet whose nodes are registered in a
// cluster and whose pods follow the cluster's Running pods.
type Fleet struct {
	*fakekubelet.Fleet
	CAFile    string   // the fleet CA, for --kubelet-certificate-authority
	NodeNames []string // the registered nodes, in order
}

// StartFleet starts a fleet serving TLS on 127.0.0.1, accepting the bearer
// tokens the cluster's TokenReview API accepts and client certificates signed
// by the cluster CA. It registers its nodes as kwok nodes (InternalIP
// 127.0.0.1, kubelet port the node's listener) and waits until they are
// Ready (bounded by two minutes unless ctx has a deadline), then follows the
// cluster's Running pods until ctx ends or the fleet is closed. Close it when
// done.
func StartFleet(ctx context.Context, c *cluster.Cluster, cfg FleetConfig) (*Fleet, error) {
	cfg.Nodes = cmp.Or(cfg.Nodes, 3)
	ff, err := fakekubelet.NewFleet(fakekubelet.Config{
		TokenAuthenticator: fakekubelet.NewTokenReviewAuthenticator(c.Client(), 10*time.Second),
		ClientCAPEM:        c.CACertPEM(),
		NodeBaseUsage:      cfg.NodeBaseUsage,
	})
	if err != nil {
		return nil, err
	}
	f := &Fleet{Fleet: ff}
	if err := f.start(ctx, c, cfg); err != nil {
		return nil, errors.Join(err, ff.Close())
	}
	return f, nil
}

func (f *Fleet) start(ctx context.Context, c *cluster.Cluster, cfg FleetConfig) error {
	f.CAFile = filepath.Join(c.WorkDir(), "fleet", "ca.crt")
	if err := cert.WriteCert(f.CAFile, f.CACertPEM()); err != nil {
		return err
	}
	errs := make([]error, cfg.Nodes)
	var wg sync.WaitGroup
	for i := range cfg.Nodes {
		name := fmt.Sprintf("fake-node-%d", i)
		f.NodeNames = append(f.NodeNames, name)
		if n, err := f.AddNode(name, 0); err != nil {
			errs[i] = err
		} else {
			wg.Go(func() { errs[i] = c.AddNode(ctx, name, nil, "127.0.0.1", n.Port()) })
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return f.StartPodInformer(ctx, c.Client())
}
