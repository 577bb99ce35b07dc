package env

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

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
