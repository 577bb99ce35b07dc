package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBadPodMetricsConfigRefusesToStart: the command returns, before
// reading a kubeconfig or listening, with every error of the file.
func TestBadPodMetricsConfigRefusesToStart(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "pod-metrics.yaml")
	if err := os.WriteFile(bad, []byte("presets: [tgi]\nmaxBytes: -1\npods: {selector: \"a in (\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, []string{"--enable-custom-metrics", "--pod-metrics-config=" + bad, "--kubeconfig=/nonexistent", "--secure-port=0"})
	if err == nil {
		t.Fatal("Run with a bad --pod-metrics-config returned nil")
	}
	for _, want := range []string{`unknown preset "tgi"`, "maxBytes: -1 must be above 0", "pods.selector:", "pods.port: required with pods.selector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "/nonexistent") {
		t.Errorf("error %q: the server went past validation", err)
	}
}
