package sources

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"unicode/utf8"
)

// Reasons a scrape failed, used as the "reason" label of the failure counter.
// The set is closed so the label stays low-cardinality.
const (
	ReasonTimeout    = "timeout"
	ReasonConnection = "connection"
	ReasonTLS        = "tls"
	ReasonHTTPStatus = "http_status"
	ReasonTooLarge   = "too_large"
	ReasonDecode     = "decode"
	ReasonOther      = "other"
)

// Clip cuts s, text a peer chose, to at most n bytes before an error or a
// log quotes it; the cut falls between runes and "..." marks it.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// ReasonError attaches a failure reason to an error.
type ReasonError struct {
	Reason string
	Err    error
}

func (e *ReasonError) Error() string { return e.Err.Error() }
func (e *ReasonError) Unwrap() error { return e.Err }

// WithReason wraps err with reason; a nil err stays nil.
func WithReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &ReasonError{Reason: reason, Err: err}
}

// Reason classifies err into one of the Reason constants.
func Reason(err error) string {
	var re *ReasonError
	if errors.As(err, &re) {
		return re.Reason
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return ReasonTimeout
		}
		return ReasonConnection
	}
	return ReasonOther
}

// TransportReason classifies an error of an HTTP round trip or body read:
// TLS, timeout, or else connection.
func TransportReason(err error) string {
	var (
		certErr      *tls.CertificateVerificationError
		recordErr    tls.RecordHeaderError
		authorityErr x509.UnknownAuthorityError
		hostErr      x509.HostnameError
		invalidErr   x509.CertificateInvalidError
		timeoutErr   interface{ Timeout() bool }
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &recordErr), errors.As(err, &authorityErr),
		errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return ReasonTLS
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.As(err, &timeoutErr) && timeoutErr.Timeout():
		return ReasonTimeout
	}
	return ReasonConnection
}

// NoRedirects is the CheckRedirect of every client that carries a
// credential: a redirect is answered as its own 3xx response, which the
// caller reports as a failed scrape, and never followed. client-go's bearer
// token round tripper adds the token to every request it sends, so a
// followed redirect would carry it to wherever the Location names, plain
// http included; net/http strips Authorization only for another host, not
// for another port or scheme. Neither the kubelet's Summary API nor ukpd's
// API answers with a redirect.
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// ReadCapped reads all of r, failing with ReasonTooLarge once it passes max
// bytes (0 = no cap).
func ReadCapped(r io.Reader, max int64) ([]byte, error) {
	var body []byte
	err := ReadCappedTo(r, max, func(b []byte) error {
		body = bytes.Clone(b)
		return nil
	})
	return body, err
}

// ReadCappedTo is ReadCapped into a buffer reused from read to read, handed
// to use, which must not keep body (or any slice of it) after it returns. A
// scrape cycle reads a body per node; read by io.ReadAll, each one grew a
// new buffer from 512 bytes by doubling, and garbage collection paid for
// every step.
func ReadCappedTo(r io.Reader, max int64, use func(body []byte) error) error {
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		// A buffer grown by an outsized body is not kept for the next.
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodies.Put(buf)
		}
	}()
	buf.Reset()
	limit := max
	if limit <= 0 {
		limit = math.MaxInt64 - 1
	}
	if _, err := buf.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return WithReason(TransportReason(err), fmt.Errorf("read body: %w", err))
	}
	if max > 0 && int64(buf.Len()) > max {
		return WithReason(ReasonTooLarge, fmt.Errorf("response larger than %d bytes", max))
	}
	return use(buf.Bytes())
}

const maxPooledBody = 1 << 20

var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}
