package env

import (
	"bytes"
	"context"
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
	if err := os.MkdirAll(v.Dir, 0o755); err != nil {
		return err
	}
	v.version++
	ts := ".." + strconv.Itoa(v.version)
	if err := os.Mkdir(filepath.Join(v.Dir, ts), 0o755); err != nil {
		return err
	}
	for k, b := range data {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, k), b, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
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
