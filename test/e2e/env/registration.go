package env

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	kubeconfig, err := s.cluster.ServiceAccountKubeconfig(ctx, s.Namespace, s.controllerSA)
	if err != nil {
		return err
	}
	s.controllerRuns++
	name := fmt.Sprintf("%s-cert-controller-%d", s.name, s.controllerRuns)
	args := append(append([]string{}, s.controllerArgs...), "--kubeconfig="+kubeconfig)
	proc, err := s.cluster.StartProcess(name, filepath.Join(s.binDir, ServerBinary), args...)
	if err != nil {
		return err
	}
	s.Controller = proc
	controllers.running[s.cluster] = s
	return nil
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
		err := s.cluster.APIServices().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
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
