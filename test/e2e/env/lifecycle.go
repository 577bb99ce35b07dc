package env

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// controllers holds, per cluster, the server whose certificate controller
// runs: one at a time, as one leads in a cluster.
var controllers = struct {
	sync.Mutex
	running map[*cluster.Cluster]*Server
}{running: map[*cluster.Cluster]*Server{}}

// Register applies the server's Service and APIServices again, so that the
// aggregator sends their requests to this server, runs its certificate
// controller in place of any other, and waits as DeployServer does.
func (s *Server) Register(ctx context.Context) error {
	if err := Apply(ctx, s.cluster, s.Process.Name()+"-register", s.registration); err != nil {
		return err
	}
	if err := s.ensureController(ctx); err != nil {
		return err
	}
	return s.waitAvailable(ctx)
}

// ensureController makes s's certificate controller the one that runs in
// its cluster: it stops another's, and starts s's unless it runs.
func (s *Server) ensureController(ctx context.Context) error {
	if s.controllerArgs == nil {
		return nil
	}
	controllers.Lock()
	defer controllers.Unlock()
	cur := controllers.running[s.cluster]
	if cur == s && s.Controller != nil && s.Controller.Err() == nil {
		return nil
	}
	if cur != nil && cur.Controller != nil {
		if err := cur.Controller.Stop(); err != nil {
			return fmt.Errorf("stop the certificate controller of %s: %w", cur.name, err)
		}
		cur.Controller = nil
	}
	delete(controllers.running, s.cluster)
	proc, err := s.startController(ctx)
	if err != nil {
		return err
	}
	s.Controller = proc
	controllers.running[s.cluster] = s
	return nil
}

// StartControllerReplica starts one more process of s's certificate
// controller beside the one that runs, as a Deployment of two replicas
// runs two pods; the caller stops it.
func (s *Server) StartControllerReplica(ctx context.Context) (*cluster.Process, error) {
	if s.controllerArgs == nil {
		return nil, fmt.Errorf("%s runs no certificate controller", s.name)
	}
	controllers.Lock()
	defer controllers.Unlock()
	return s.startController(ctx)
}

// startController starts a process of s's certificate controller; callers
// hold controllers.
func (s *Server) startController(ctx context.Context) (*cluster.Process, error) {
	kubeconfig, err := s.cluster.ServiceAccountKubeconfig(ctx, s.Namespace, s.controllerSA)
	if err != nil {
		return nil, err
	}
	s.controllerRuns++
	name := fmt.Sprintf("%s-cert-controller-%d", s.name, s.controllerRuns)
	args := append(append([]string{}, s.controllerArgs...), "--kubeconfig="+kubeconfig)
	return s.cluster.StartProcess(name, filepath.Join(s.binDir, ServerBinary), args...)
}

// Undeploy hands the Service and APIServices back to prev (Register), deletes
// the APIServices s registered that prev does not, and stops s (Stop). The
// other objects s applied stay.
func (s *Server) Undeploy(ctx context.Context, prev *Server) error {
	if err := prev.Register(ctx); err != nil {
		return err
	}
	var errs []error
	for _, name := range s.APIServices {
		if slices.Contains(prev.APIServices, name) {
			continue
		}
		if err := s.cluster.APIServices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete APIService %s: %w", name, err))
		}
	}
	return errors.Join(append(errs, s.Stop())...)
}

// Stop stops the server and its certificate controller, as the pods of
// deleted Deployments stop, and its Secret volumes.
func (s *Server) Stop() error {
	var errs []error
	controllers.Lock()
	if s.Controller != nil {
		errs = append(errs, s.Controller.Stop())
		s.Controller = nil
	}
	if controllers.running[s.cluster] == s {
		delete(controllers.running, s.cluster)
	}
	controllers.Unlock()
	if s.Process != nil {
		errs = append(errs, s.Process.Stop())
	}
	if s.stopVolumes != nil {
		s.stopVolumes()
	}
	return errors.Join(errs...)
}

// RunRelease runs the Deployments of objs, the objects of an installed Helm
// release (helm get manifest), as DeployServer runs the manifests' ones, and
// returns as it does. helm has applied everything else, and the release's
// Service must already lead to 127.0.0.1:port (type ExternalName,
// externalName localhost, port port, which the APIServices name too);
// cfg.ManifestsDir and ForceConflicts are not used.
func RunRelease(ctx context.Context, c *cluster.Cluster, objs []*unstructured.Unstructured, port int, cfg ServerConfig) (*Server, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	s, deploy, err := newServer(c, cfg, objs)
	if err != nil {
		return nil, err
	}
	s.Port = port
	svc, _ := find(objs, "Service", "") // newServer found it
	if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ExternalName" {
		return nil, fmt.Errorf("service %s is of type %q: the aggregator reaches a process on the host only through type ExternalName", svc.GetName(), typ)
	}
	return s, s.start(ctx, objs, deploy, cfg)
}

// mountVolumes keeps each Secret volume ctr mounts in a local directory and
// points the args of ctr that name a file in it there.
func (s *Server) mountVolumes(ctx context.Context, ctr *corev1.Container, volumes []corev1.Volume) error {
	volumeCtx, stopVolumes := context.WithCancel(context.Background())
	s.stopVolumes = stopVolumes
	for _, m := range ctr.VolumeMounts {
		i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == m.Name && v.Secret != nil })
		if i < 0 {
			continue
		}
		secret := volumes[i].Secret.SecretName
		v := MountSecret(volumeCtx, s.cluster.Client(), s.Namespace, secret, filepath.Join(s.cluster.WorkDir(), s.name+"-volumes", secret))
		select {
		case <-v.Exists():
		case <-ctx.Done():
			return fmt.Errorf("secret %s for the server's volume: %w", secret, ctx.Err())
		}
		for i, a := range ctr.Args {
			if name, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(val, m.MountPath+"/") {
				ctr.Args[i] = name + "=" + filepath.Join(v.Dir, strings.TrimPrefix(val, m.MountPath+"/"))
			}
		}
	}
	return nil
}

// SecretVolume stands in for the kubelet's Secret volume for a process
// that runs outside a pod: it writes the Secret's keys into Dir as the
// kubelet does (files behind a ..data symlink that is swapped in one
// rename, so a reader sees all old or all new keys) and follows the
// Secret's changes.
type SecretVolume struct {
	Dir string

	mu      sync.Mutex
	written map[string][]byte
	version int
	exists  chan struct{}
}

// MountSecret starts following namespace/name into dir until ctx is done.
// The directory appears once the Secret exists, as a pod's volume does.
func MountSecret(ctx context.Context, client kubernetes.Interface, namespace, name, dir string) *SecretVolume {
	v := &SecretVolume{Dir: dir, exists: make(chan struct{})}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		s, err := client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			if err := v.write(s.Data); err != nil {
				klog.ErrorS(err, "Secret volume write failed", "secret", klog.KRef(namespace, name))
			}
		case !apierrors.IsNotFound(err) && ctx.Err() == nil:
			klog.V(2).InfoS("Secret volume read failed", "secret", klog.KRef(namespace, name), "err", err)
		}
	}, 500*time.Millisecond) // well within the kubelet's sync period (a minute)
	return v
}

// Exists is closed once the directory holds the Secret.
func (v *SecretVolume) Exists() <-chan struct{} { return v.exists }

func (v *SecretVolume) write(data map[string][]byte) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.version > 0 && maps.EqualFunc(v.written, data, bytes.Equal) {
		return nil
	}
	v.version++
	ts := ".." + strconv.Itoa(v.version)
	if err := os.MkdirAll(filepath.Join(v.Dir, ts), 0o755); err != nil {
		return err
	}
	for k, b := range data {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, k), b, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	_ = os.Remove(tmp)
	err := os.Symlink(ts, tmp)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(v.Dir, "..data"))
	}
	if err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(data)) {
		link := filepath.Join(v.Dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			return err
		}
	}
	for k := range v.written {
		if _, ok := data[k]; !ok {
			_ = os.Remove(filepath.Join(v.Dir, k))
		}
	}
	if v.version > 1 {
		_ = os.RemoveAll(filepath.Join(v.Dir, ".."+strconv.Itoa(v.version-1)))
	} else {
		close(v.exists)
	}
	v.written = maps.Clone(data)
	return nil
}
