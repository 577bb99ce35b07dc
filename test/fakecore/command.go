// Package fakecore is what the fake kubelet fleet and the fake ukpd have in
// common: the command's shape, the faults and the TLS endpoint that serves
// them, the control API (server, Route, and client, Control), bearer
// tokens, and the state file their users poll for.
package fakecore

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

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
// address or localhost: control APIs change what the fakes report and never
// listen anywhere else.
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

// ParseTokens reads a token file: a token a line, "#" starting a comment.
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
// header (the scheme in any case), or "".
func BearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// KnownToken says whether token, not empty, is one of known, compared in
// constant time.
func KnownToken(token string, known ...string) bool {
	found := 0
	for _, k := range known {
		found |= subtle.ConstantTimeCompare([]byte(k), []byte(token))
	}
	return found == 1 && token != ""
}

// WriteState writes v as JSON to path, atomically: what a fake's program
// writes last, once it serves, to tell its users where it is.
func WriteState(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o644)
}

// ReadState reads what WriteState wrote to path.
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

// NewControlMux starts a fake's plain-HTTP control API, for a loopback
// address only: GET /healthz, and GET /v1/ca.crt with caPEM (404 when nil:
// the fake serves plain HTTP).
func NewControlMux(caPEM []byte) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/ca.crt", func(w http.ResponseWriter, _ *http.Request) {
		if caPEM == nil {
			writeError(w, http.StatusNotFound, errors.New("serving plain HTTP: no CA"))
			return
		}
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(caPEM)
	})
	return mux
}

// ErrNotFound is what a control route answers 404 for: a node, pod or
// instance the fake does not know.
var ErrNotFound = errors.New("not found")

// None is the request type of a route that reads no body.
type None struct{}

// Matched is the answer of a route that acted on n objects.
func Matched(n int) map[string]int { return map[string]int{"matched": n} }

// Route makes a control route of do: the request's body is read into a Req
// (not for None; unknown fields and bodies over 1 MiB are refused with
// 400), and do's answer is sent with code, or its error with 404 when it
// wraps ErrNotFound and 400 otherwise.
func Route[Req any](code int, do func(r *http.Request, req Req) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		var v any
		var err error
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if _, none := any(req).(None); !none {
			err = dec.Decode(&req)
		}
		if err == nil {
			v, err = do(r, req)
		} else {
			err = fmt.Errorf("decode request: %w", err)
		}
		switch {
		case errors.Is(err, ErrNotFound):
			writeError(w, http.StatusNotFound, err)
		case err != nil:
			writeError(w, http.StatusBadRequest, err)
		default:
			writeJSON(w, code, v)
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// HTTPServer is an API a fake's program serves, until Stop.
type HTTPServer struct {
	srv  *http.Server
	done chan struct{}
	err  error
}

// Listen serves h on addr and returns the address it listens on.
func Listen(addr string, h http.Handler) (*HTTPServer, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &HTTPServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		s.err = s.srv.Serve(ln)
		close(s.done)
	}()
	return s, ln.Addr().String(), nil
}

// Stop shuts the server down and waits for Serve to return.
func (s *HTTPServer) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if !errors.Is(s.err, http.ErrServerClosed) {
		err = errors.Join(err, s.err)
	}
	return err
}

// Control is a client of a fake's control API at Address (host:port).
type Control struct{ Address string }

// Do sends method path with in, if not nil, as its JSON body and decodes
// the answer into out, if not nil. An answer whose code is not one of
// okCodes (200 when none) is an error that carries the answer's message.
func (c Control) Do(ctx context.Context, method, path string, in, out any, okCodes ...int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Address+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if !slices.Contains(okCodes, resp.StatusCode) && (len(okCodes) > 0 || resp.StatusCode != http.StatusOK) {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("control API: %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("control API: %s %s: %w", method, path, err)
		}
	}
	return nil
}
