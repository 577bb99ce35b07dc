package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// cleanUpRealNodes removes what a real node of a demo that died left on
// the machine (its containers, shims, mounts, bridge and log links), for
// each node directory under <clusterDir>/nodes: the RealNode.Stop that
// would have done it needs the RealNode value, which died with the demo;
// cluster.CleanUpRealNode needs only the directory. It prints what it
// removed; with nothing left it prints nothing. Safe to run on a directory
// whose node stopped cleanly.
func cleanUpRealNodes(clusterDir string) error {
	dirs, err := filepath.Glob(filepath.Join(clusterDir, "nodes", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		r, err := cluster.CleanUpRealNode(d)
		errs = append(errs, err)
		if s := r.String(); s != "" {
			fmt.Printf("Removed what the real node in %s left: %s\n", d, s)
		}
	}
	return errors.Join(errs...)
}
