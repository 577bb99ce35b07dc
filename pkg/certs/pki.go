package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Authority is a CA: its certificate, and its key where it may still sign.
type Authority struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     *ecdsa.PrivateKey
	KeyPEM  []byte
}

// Pair is a serving certificate and its key, PEM-encoded.
type Pair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// backdate is how far before its issue a certificate becomes valid, so a
// verifier whose clock is a little behind accepts it: a tenth of the
// validity, at most five minutes.
func backdate(validity time.Duration) time.Duration {
	return min(validity/10, 5*time.Minute)
}

// renewAt is when a certificate is replaced: when a third of its life
// remains.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3)
}

// NewAuthority makes a self-signed CA valid for validity from now.
func NewAuthority(now time.Time, validity time.Duration) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("group-metrics-server-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate(validity)),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return ParseAuthority(pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// ParseAuthority reads a CA certificate and its key, which must match.
func ParseAuthority(certPEM, keyPEM []byte) (*Authority, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate is not a CA")
	}
	key, err := parseKeyOf(cert, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return &Authority{Cert: cert, CertPEM: certPEM, Key: key, KeyPEM: keyPEM}, nil
}

// Issue signs a serving pair for dnsNames, valid for validity from now but
// never past the CA's own expiry.
func (a *Authority) Issue(dnsNames []string, now time.Time, validity time.Duration) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(a.Cert.NotAfter) {
		notAfter = a.Cert.NotAfter
	}
	cn := "group-metrics-server"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-backdate(validity)),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &key.PublicKey, a.Key)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return ParsePair(pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// ParsePair reads a serving certificate and checks its key matches.
func ParsePair(certPEM, keyPEM []byte) (*Pair, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if _, err := parseKeyOf(cert, keyPEM); err != nil {
		return nil, fmt.Errorf("serving key: %w", err)
	}
	return &Pair{Cert: cert, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// parseKeyOf reads the EC private key of cert.
func parseKeyOf(cert *x509.Certificate, keyPEM []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("does not match its certificate")
	}
	return key, nil
}

// signedBy says whether c verifies against ca (signature only: validity
// periods are the planner's business).
func signedBy(c, ca *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, ca.RawSubject) && c.CheckSignatureFrom(ca) == nil
}

// coversAll says whether c is valid for every one of names.
func coversAll(c *x509.Certificate, names []string) bool {
	for _, n := range names {
		if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	return true
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParseCerts reads every certificate of a PEM bundle, skipping blocks that
// are not certificates or do not parse.
func ParseCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(fmt.Sprintf("serial number: %v", err))
	}
	return n
}
