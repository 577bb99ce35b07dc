//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// The certificate controller's Lease, as manifests/base names it.
const (
	controllerLeaseNamespace = "kube-system"
	controllerLease          = "group-metrics-server-cert-controller"
)

// leaseLostBound is how soon a standing-by replica leads once the Lease
// is gone and its holder dead: it tries every RetryPeriod (2 s, up to
// 4.4 s with client-go's jitter factor 1.2), finds no Lease and creates
// one. Two tries, so that one that meets a slow API does not fail it, and
// a second for the API.
const leaseLostBound = 10 * time.Second

// TestCertControllerLeaseLost runs a second replica of the suite's
// certificate controller, kills the replica that leads (SIGKILL: it
// releases nothing) and deletes the Lease: the other replica creates the
// Lease again and leads within leaseLostBound, rather than no replica ever
// leading (which a controller without the right to create its Lease did).
func TestCertControllerLeaseLost(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	s := suite.server
	leader := s.Controller
	replica, err := s.StartControllerReplica(ctx)
	must(t, err)
	t.Cleanup(func() {
		_ = replica.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The suite's controller runs again, as the Deployment's pod
		// would be restarted.
		if err := s.Register(ctx); err != nil {
			t.Errorf("the suite's certificate controller: %v", err)
		}
	})
	must(t, logged(leader, `"Successfully acquired lease"`))
	must(t, boundedPoll(ctx, 30*time.Second, "the second replica to stand by", []*cluster.Process{replica}, func(context.Context) error {
		return logged(replica, `"Attempting to acquire leader lease`)
	}))
	if err := logged(replica, `"Successfully acquired lease"`); err == nil {
		t.Fatal("the second replica leads while the first one holds the Lease")
	}
	must(t, syscall.Kill(leader.Pid(), syscall.SIGKILL))
	<-leader.Done()
	leases := suite.cluster.Client().CoordinationV1().Leases(controllerLeaseNamespace)
	must(t, leases.Delete(ctx, controllerLease, metav1.DeleteOptions{}))
	lost := time.Now()
	must(t, boundedPoll(ctx, leaseLostBound, "the second replica to create the Lease and lead", []*cluster.Process{replica}, func(ctx context.Context) error {
		l, err := leases.Get(ctx, controllerLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return errors.New("the Lease has no holder")
		}
		return logged(replica, `"Successfully acquired lease"`)
	}))
	t.Logf("leader killed and Lease deleted: the other replica created it and leads %v later (bound %v)", since(lost), leaseLostBound)
}

// logged says whether p's log has a line holding every one of words.
func logged(p *cluster.Process, words ...string) error {
	lines, err := linesWith(p.LogPath(), words...)
	switch {
	case err != nil:
		return err
	case len(lines) == 0:
		return fmt.Errorf("%s has not logged %q", p.Name(), words)
	}
	return nil
}
