package fakecore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"
)

// NewControlMux starts a fake's plain-HTTP control API: GET /healthz, and
// GET /v1/ca.crt with caPEM (404 when nil: the fake serves plain HTTP). The
// fake adds its own routes. Serve it on a loopback address only.
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
		if _, none := any(req).(None); !none {
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
			dec.DisallowUnknownFields()
			if err = dec.Decode(&req); err != nil {
				err = fmt.Errorf("decode request: %w", err)
			}
		}
		if err == nil {
			v, err = do(r, req)
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

// writeJSON answers code with v as indented JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers code with {"error": err}.
func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// HTTPServer is an API a fake's program serves, until Stop.
type HTTPServer struct {
	srv  *http.Server
	done chan struct{}
	err  error
}

// Listen serves h on addr, a fake program's API, and returns the address
// it listens on (the port picked when addr has port 0).
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

// Control is a client of a fake's control API, which serves JSON in plain
// HTTP on a loopback address.
type Control struct {
	// Address is the control API's host:port.
	Address string
}

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
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("control API: %s %s: %w", method, path, err)
	}
	return nil
}
