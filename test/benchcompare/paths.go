package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// serverBinary is group-metrics-server's binary in the bin directory.
const serverBinary = "group-metrics-server"

// binaries are every binary a run needs, with the make target that builds it.
var binaries = map[string]string{
	cluster.EtcdBinary:              "make tools",
	cluster.APIServerBinary:         "make tools",
	cluster.ControllerManagerBinary: "make tools",
	cluster.KubectlBinary:           "make tools",
	cluster.KwokBinary:              "make tools",
	cluster.MetricsServerBinary:     "make tools",
	serverBinary:                    "make build",
}

// repoRoot returns the directory holding the main module's go.mod, searched
// upwards from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	want := []byte("module github.com/group-metrics-server/group-metrics-server\n")
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(data, want) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root above the working directory")
		}
		dir = parent
	}
}

// binDir returns --bin-dir, $GMS_BIN_DIR or <repo>/bin.
func binDir(flag, root string) (string, error) {
	for _, d := range []string{flag, os.Getenv("GMS_BIN_DIR")} {
		if d != "" {
			return filepath.Abs(d)
		}
	}
	return filepath.Join(root, "bin"), nil
}

// checkBinaries reports every missing binary with the target that builds it.
func checkBinaries(dir string) error {
	var errs []error
	for name, target := range binaries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("%w (run `%s` or set GMS_BIN_DIR)", err, target))
		}
	}
	return errors.Join(errs...)
}

// createNamespace creates a namespace and waits, at most a minute, for its
// default ServiceAccount, without which pods are not admitted.
func (b *bench) createNamespace(ctx context.Context, name string) error {
	client := b.cluster.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return cluster.Poll(ctx, "the default ServiceAccount of "+name, nil,
		func(ctx context.Context) error {
			_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
			return err
		})
}
