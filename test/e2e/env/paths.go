// Package env deploys group-metrics-server onto a local control plane from
// test/cluster, next to a fake kubelet fleet, for the e2e suite and the demo.
// It applies the objects of manifests/base as users do, changing only what a
// server running on 127.0.0.1 instead of in a pod forces.
package env

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// ServerBinary is the name of the server binary in the bin directory.
const ServerBinary = "group-metrics-server"

// RepoRoot returns the directory holding the main module's go.mod, searched
// upwards from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isMainModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (go.mod of the main module) above the working directory")
		}
		dir = parent
	}
}

const modulePath = "github.com/group-metrics-server/group-metrics-server"

func isMainModule(goMod []byte) bool {
	want := "module " + modulePath + "\n"
	return len(goMod) >= len(want) && string(goMod[:len(want)]) == want
}

// BinDir returns $GMS_BIN_DIR, or <repo>/bin.
func BinDir() (string, error) {
	if dir := os.Getenv("GMS_BIN_DIR"); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// CheckBinaries reports every binary of names missing from dir, with the make
// target that builds it.
func CheckBinaries(dir string, names ...string) error {
	var errs []error
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			hint := "make tools"
			if n == ServerBinary {
				hint = "make build"
			}
			errs = append(errs, fmt.Errorf("%w (run `%s` or set GMS_BIN_DIR)", err, hint))
		}
	}
	return errors.Join(errs...)
}

// ControlPlaneBinaries are the binaries cluster.Start needs.
var ControlPlaneBinaries = []string{
	cluster.EtcdBinary, cluster.APIServerBinary, cluster.ControllerManagerBinary,
	cluster.SchedulerBinary, cluster.KubectlBinary, cluster.KwokBinary,
}
