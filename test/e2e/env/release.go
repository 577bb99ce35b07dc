package env

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
