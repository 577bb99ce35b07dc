// Package fakecore is what the fake kubelet fleet and the fake ukpd have in
// common: the command's shape, the faults and the TLS endpoint that serves
// them, the control API (server, Route, and client, Control), bearer
// tokens, and the state file their users poll for.
package fakecore

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
)

// Options are a fake command's flags; Validate returns every problem.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() []error
}

// NewCommand makes the command name with opts' flags; run sees the options
// parsed and valid, and the command's context.
func NewCommand(name string, opts Options, run func(ctx context.Context) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:  name,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if errs := opts.Validate(); len(errs) > 0 {
				return errors.Join(errs...)
			}
			return run(cmd.Context())
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}

// Main runs cmd, with klog's flags, until SIGINT or SIGTERM, and exits 1
// when it fails.
func Main(cmd *cobra.Command) {
	cmd.SetContext(genericapiserver.SetupSignalContext())
	os.Exit(cli.Run(cmd))
}

// CheckLoopback returns an error unless addr is host:port on a loopback
// address (or localhost): control APIs change what the fakes report and
// never listen anywhere else.
func CheckLoopback(flagName, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s: %w", flagName, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--%s %q is not a loopback address", flagName, addr)
	}
	return nil
}

// ParseTokens reads a token file: one token a line, skipping blank lines
// and "#" comments.
func ParseTokens(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, t)
		}
	}
	return out
}

// BearerToken returns the token of a request's "Authorization: Bearer"
// header (the scheme in any case), or "" without one.
func BearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// KnownToken says whether token, not empty, is one of known; each is
// compared in constant time.
func KnownToken(token string, known ...string) bool {
	found := 0
	for _, k := range known {
		found |= subtle.ConstantTimeCompare([]byte(k), []byte(token))
	}
	return found == 1 && token != ""
}

// WriteState writes v as indented JSON to path, atomically: what a fake's
// program writes last, once it serves, to tell its users where it is.
func WriteState(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o644)
}

// ReadState reads what WriteState wrote to path; it fails until the fake
// has written it.
func ReadState[T any](path string) (*T, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s T
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// writeAtomic writes data to path through a temporary file and a rename,
// so a reader polling for path never sees part of it.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path+".tmp", data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(path+".tmp", path)
}
