package kubelet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"

	"k8s.io/klog/v2"
)

// TroubleshootingDoc is the page that explains kubelet certificate failures;
// hints name it so the log line and the NotFound answer lead there.
const TroubleshootingDoc = "docs/troubleshooting.md#kubelet-certificate-x509-errors"

// Kinds of kubelet serving-certificate failure, each with its own hint.
const (
	certNoSAN        = "no_matching_san"
	certUnknownCA    = "unknown_authority"
	certInvalid      = "invalid_certificate"
	certVerifyFailed = "verify_failed"
)

var certHints = map[string]string{
	certNoSAN: "the kubelet's serving certificate does not name the address the server dialled (a self-signed kubelet " +
		"certificate has no IP SANs): let kubelets get CA-signed serving certificates (KubeletConfiguration " +
		"serverTLSBootstrap: true, then approve their CSRs), or dial an address type the certificate names with " +
		"--kubelet-preferred-address-types (Hostname first, say); see " + TroubleshootingDoc,
	certUnknownCA: "the kubelet's serving certificate is not signed by a CA the server trusts: set " +
		"--kubelet-certificate-authority to the CA that signs kubelet serving certificates (with serverTLSBootstrap, " +
		"the cluster CA); self-signed kubelet certificates cannot be verified; see " + TroubleshootingDoc,
	certInvalid: "the kubelet's serving certificate is not valid now (expired, not yet valid, or not for serving): " +
		"renew it (serverTLSBootstrap: true rotates it) and check the node's clock; see " + TroubleshootingDoc,
	certVerifyFailed: "the kubelet's serving certificate failed verification; check --kubelet-certificate-authority " +
		"and the certificate's SANs; see " + TroubleshootingDoc,
}

// certFailure returns the kind of kubelet serving-certificate failure err
// is, or "" when it is none.
func certFailure(err error) string {
	var (
		hostErr      x509.HostnameError
		authorityErr x509.UnknownAuthorityError
		invalidErr   x509.CertificateInvalidError
		verifyErr    *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &hostErr):
		return certNoSAN
	case errors.As(err, &authorityErr):
		return certUnknownCA
	case errors.As(err, &invalidErr):
		return certInvalid
	case errors.As(err, &verifyErr):
		return certVerifyFailed
	}
	return ""
}

// certHintError carries the hint next to the TLS error, so the store's
// "node is unreachable" reason (and the NotFound answer built from it) names
// the fix.
type certHintError struct {
	err  error
	hint string
}

func (e *certHintError) Error() string { return e.err.Error() + " (hint: " + e.hint + ")" }
func (e *certHintError) Unwrap() error { return e.err }

// hinter logs each kind of certificate failure once per Client, with its
// hint, the first time a node fails for it; the scraper's own log line for
// each failing node follows as usual.
type hinter struct {
	mu     sync.Mutex
	logged map[string]bool
}

// withHint wraps err with the hint of its kind of certificate failure, and
// logs the hint the first time that kind is seen. Other errors pass through.
func (h *hinter) withHint(node, addr string, err error) error {
	kind := certFailure(err)
	if kind == "" {
		return err
	}
	if h.first(kind) {
		klog.ErrorS(err, "Kubelet serving certificate rejected; this is logged once per kind, every failing node shows it in its scrape error",
			"node", node, "address", addr, "kind", kind, "hint", certHints[kind])
	}
	return &certHintError{err: err, hint: certHints[kind]}
}

// first reports whether kind is seen for the first time.
func (h *hinter) first(kind string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.logged[kind] {
		return false
	}
	if h.logged == nil {
		h.logged = map[string]bool{}
	}
	h.logged[kind] = true
	return true
}
