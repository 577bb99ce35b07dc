package env

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/util/cert"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

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
		n, err := f.AddNode(name, 0)
		if err != nil {
			errs[i] = err
			continue
		}
		wg.Go(func() { errs[i] = c.AddNode(ctx, name, nil, "127.0.0.1", n.Port()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return f.StartPodInformer(ctx, c.Client())
}
