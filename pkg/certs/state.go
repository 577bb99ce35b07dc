package certs

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the CA Secret.
const (
	KeyCACert       = "ca.crt"
	KeyCAKey        = "ca.key"
	KeyNextCert     = "next.crt"
	KeyNextKey      = "next.key"
	KeyPreviousCert = "previous.crt"
)

// Keys of the serving Secret, as cert-manager writes them.
const (
	KeyServingCert = corev1.TLSCertKey
	KeyServingKey  = corev1.TLSPrivateKeyKey
	KeyServingCA   = "ca.crt"
)

// Annotations of the CA Secret that hold the planner's times.
const (
	AnnotationNextTrustedSince = "group-metrics-server.io/next-ca-trusted-since"
	AnnotationPreviousUntil    = "group-metrics-server.io/previous-ca-until"
)

// State is what the controller keeps, as read from its two Secrets.
type State struct {
	// Active signs serving pairs.
	Active *Authority
	// Next is trusted but does not sign yet.
	Next *Authority
	// NextTrustedSince is when every managed APIService first held a
	// caBundle with Next; zero until then.
	NextTrustedSince time.Time
	// Previous no longer sign but are still trusted.
	Previous []*x509.Certificate
	// PreviousUntil is when Previous may go, as far as the pairs published
	// so far are concerned; zero while the published pair needs them.
	PreviousUntil time.Time
	// Serving is the published serving pair.
	Serving *Pair
	// ServingCAs are the CAs published beside Serving (the serving
	// Secret's ca.crt). Plan keeps trusting the one that signed Serving
	// even when the CA Secret has lost it.
	ServingCAs []*x509.Certificate
}

// ReadState reads the controller's Secrets; either may be nil (absent).
// What does not parse is left out, and said in problems: the planner then
// replaces it.
func ReadState(caSecret, servingSecret *corev1.Secret) (s State, problems []string) {
	if caSecret != nil {
		d := caSecret.Data
		if len(d[KeyCACert]) > 0 || len(d[KeyCAKey]) > 0 {
			a, err := ParseAuthority(d[KeyCACert], d[KeyCAKey])
			if err != nil {
				problems = append(problems, fmt.Sprintf("active CA: %v", err))
			}
			s.Active = a
		}
		if len(d[KeyNextCert]) > 0 || len(d[KeyNextKey]) > 0 {
			a, err := ParseAuthority(d[KeyNextCert], d[KeyNextKey])
			if err != nil {
				problems = append(problems, fmt.Sprintf("next CA: %v", err))
			}
			s.Next = a
		}
		s.Previous = ParseCerts(d[KeyPreviousCert])
		s.NextTrustedSince = parseTime(caSecret.Annotations[AnnotationNextTrustedSince])
		s.PreviousUntil = parseTime(caSecret.Annotations[AnnotationPreviousUntil])
	}
	if s.Next == nil {
		s.NextTrustedSince = time.Time{}
	}
	if servingSecret != nil {
		d := servingSecret.Data
		if len(d[KeyServingCert]) > 0 || len(d[KeyServingKey]) > 0 {
			p, err := ParsePair(d[KeyServingCert], d[KeyServingKey])
			if err != nil {
				problems = append(problems, fmt.Sprintf("serving pair: %v", err))
			}
			s.Serving = p
		}
		s.ServingCAs = ParseCerts(d[KeyServingCA])
	}
	return s, problems
}

// Trusted are the CAs a verifier must trust: Active, Next and Previous,
// each once.
func (s State) Trusted() []*x509.Certificate {
	var out []*x509.Certificate
	add := func(c *x509.Certificate) {
		for _, o := range out {
			if o.Equal(c) {
				return
			}
		}
		out = append(out, c)
	}
	if s.Active != nil {
		add(s.Active.Cert)
	}
	if s.Next != nil {
		add(s.Next.Cert)
	}
	for _, c := range s.Previous {
		add(c)
	}
	return out
}

// Bundle is Trusted as a PEM bundle: the caBundle of the APIServices and the
// serving Secret's ca.crt.
func (s State) Bundle() []byte {
	var b bytes.Buffer
	for _, c := range s.Trusted() {
		b.Write(pemCert(c.Raw))
	}
	return b.Bytes()
}

// CASecret returns the CA Secret's data and the planner's annotations.
func (s State) CASecret() (data map[string][]byte, annotations map[string]string) {
	data = map[string][]byte{}
	annotations = map[string]string{}
	if s.Active != nil {
		data[KeyCACert], data[KeyCAKey] = s.Active.CertPEM, s.Active.KeyPEM
	}
	if s.Next != nil {
		data[KeyNextCert], data[KeyNextKey] = s.Next.CertPEM, s.Next.KeyPEM
	}
	if len(s.Previous) > 0 {
		var b bytes.Buffer
		for _, c := range s.Previous {
			b.Write(pemCert(c.Raw))
		}
		data[KeyPreviousCert] = b.Bytes()
	}
	if !s.NextTrustedSince.IsZero() {
		annotations[AnnotationNextTrustedSince] = s.NextTrustedSince.UTC().Format(time.RFC3339Nano)
	}
	if !s.PreviousUntil.IsZero() {
		annotations[AnnotationPreviousUntil] = s.PreviousUntil.UTC().Format(time.RFC3339Nano)
	}
	return data, annotations
}

// ServingSecret returns the serving Secret's data.
func (s State) ServingSecret() map[string][]byte {
	data := map[string][]byte{KeyServingCA: s.Bundle()}
	if s.Serving != nil {
		data[KeyServingCert], data[KeyServingKey] = s.Serving.CertPEM, s.Serving.KeyPEM
	}
	return data
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
