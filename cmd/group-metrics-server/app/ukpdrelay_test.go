package app

import (
	"strings"
	"testing"
)

// TestUkpdRelayRefusesToStart: the subcommand returns, before reading a
// kubeconfig or listening, with every error of its flags.
func TestUkpdRelayRefusesToStart(t *testing.T) {
	// No token file, node or certificate.
	refusesToStart(t, []string{UkpdRelayCommand, "--ukpd-url=http://10.0.0.5:45232", "--kubeconfig=/nonexistent", "--secure-port=0"},
		"--secure-port", "--tls-cert-file", "--ukpd-url: ukpd endpoint http://10.0.0.5:45232: the host must be loopback",
		"--ukpd-token-file is required", "--node-name is required")
}

// TestUkpdRelayFlagsAreItsOwn: the server's flags are not the relay's.
func TestUkpdRelayFlagsAreItsOwn(t *testing.T) {
	err := Run(t.Context(), []string{UkpdRelayCommand, "--metric-resolution=15s"})
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --metric-resolution") {
		t.Fatalf("Run ukpd-relay --metric-resolution = %v, want an unknown-flag error", err)
	}
}
