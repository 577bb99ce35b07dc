package sources

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
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

// ReadCapped reads all of r, failing with ReasonTooLarge once it passes max
// bytes (0 = no cap).
func ReadCapped(r io.Reader, max int64) ([]byte, error) {
	if max <= 0 {
		return io.ReadAll(r)
	}
	body, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, WithReason(TransportReason(err), fmt.Errorf("read body: %w", err))
	}
	if int64(len(body)) > max {
		return nil, WithReason(ReasonTooLarge, fmt.Errorf("response larger than %d bytes", max))
	}
	return body, nil
}
