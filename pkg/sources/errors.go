package sources

import (
	"context"
	"errors"
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
