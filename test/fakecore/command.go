// Package fakecore is what the fake kubelet fleet and the fake ukpd have in
// common as programs: the command's shape (flags with klog's, every
// validation error at once, a signal-aware run), loopback checks for their
// control APIs, the HTTP servers they run (Serve), and atomic writes of the
// files their users poll for.
package fakecore

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Options are a fake command's flags.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	// Validate returns every problem with the options.
	Validate() []error
}

// Command is a fake's program: its options and what runs once they are
// valid.
type Command struct {
	name string
	opts Options
	run  func(ctx context.Context) error
	fs   *pflag.FlagSet
}

// NewCommand makes the command name with opts' flags and klog's; run sees
// the options parsed and valid.
func NewCommand(name string, opts Options, run func(ctx context.Context) error) *Command {
	c := &Command{name: name, opts: opts, run: run, fs: pflag.NewFlagSet(name, pflag.ContinueOnError)}
	opts.AddFlags(c.fs)
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	c.fs.AddGoFlagSet(klogFlags)
	return c
}

// Execute parses args, validates them and runs until ctx ends. --help
// prints the flags and returns nil.
func (c *Command) Execute(ctx context.Context, args []string) error {
	errs := c.Check(args)
	switch {
	case len(errs) == 1 && errors.Is(errs[0], pflag.ErrHelp):
		return nil
	case len(errs) > 0:
		return errors.Join(errs...)
	}
	return c.run(ctx)
}

// Check parses args and returns the parse error or every validation error,
// without running anything.
func (c *Command) Check(args []string) []error {
	if err := c.fs.Parse(args); err != nil {
		return []error{err}
	}
	return c.opts.Validate()
}

// Main executes the command with the process's arguments until SIGINT or
// SIGTERM, and exits 1 when it fails.
func (c *Command) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := c.Execute(ctx, os.Args[1:])
	stop()
	if err != nil {
		klog.ErrorS(err, c.name+" failed")
		klog.Flush()
		os.Exit(1)
	}
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
	found := false
	for _, k := range known {
		if subtle.ConstantTimeCompare([]byte(k), []byte(token)) == 1 {
			found = true
		}
	}
	return found && token != ""
}

// WriteState writes v as indented JSON to path, atomically: what a fake's
// program writes last, once it serves, to tell its users where it is.
func WriteState(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(path, append(b, '\n'), 0o644)
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

// WriteAtomic writes data to path through a temporary file and a rename,
// so a reader polling for path never sees part of it.
func WriteAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}
