// Package pki is the one certificate authority of the test estate: the
// local control plane, the fake kubelets, the fake ukpd and the in-process
// server tests all sign their certificates with it.
//
// Keys go to PEM through client-go's keyutil. The product's own CA, with
// its renewal rules, is pkg/certs; this one only has to be valid for a run.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Backdate is how long before its issue a certificate becomes valid, so a
// verifier whose clock is a little behind accepts it.
const Backdate = time.Hour

// CA is a self-signed certificate authority held in memory.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// NewCA makes a CA named commonName, valid from Backdate before now until
// validity after it.
func NewCA(commonName string, now time.Time, validity time.Duration) (*CA, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	ca := &CA{}
	der, key, err := ca.sign(tmpl)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", commonName, err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("parse CA %s: %w", commonName, err)
	}
	ca.key, ca.certPEM = key, encodeCert(der)
	return ca, nil
}

// sign makes a key and a certificate of tmpl for it, signed by ca, or
// self-signed when ca has no key yet.
func (ca *CA) sign(tmpl *x509.Certificate) (der []byte, key *ecdsa.PrivateKey, err error) {
	if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	// A random 120-bit serial; crypto/rand does not fail on the platforms
	// Go supports.
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120)); err != nil {
		return nil, nil, err
	}
	parent, signer := tmpl, crypto.Signer(key)
	if ca.key != nil {
		parent, signer = ca.cert, ca.key
	}
	if der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer); err != nil {
		return nil, nil, fmt.Errorf("sign: %w", err)
	}
	return der, key, nil
}

// CertPEM is the CA's certificate, for clients and servers to verify
// against.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// NotAfter is when the CA, and every certificate it issued, expires.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName    string
	Organizations []string
	// Hosts are the IP addresses and DNS names a serving certificate
	// covers.
	Hosts []string
	// Client and Server choose the extended key usages.
	Client, Server bool
}

// Issue signs l with a new key, valid from Backdate before now until the
// CA's own expiry, and returns both in PEM.
func (ca *CA) Issue(now time.Time, l Leaf) (certPEM, keyPEM []byte, err error) {
	tmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: l.CommonName, Organization: l.Organizations},
		NotBefore: now.Add(-Backdate),
		NotAfter:  ca.cert.NotAfter,
		KeyUsage:  x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, key, err := ca.sign(tmpl)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate for %s: %w", l.CommonName, err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key for %s: %w", l.CommonName, err)
	}
	return encodeCert(der), keyPEM, nil
}

// TLSCertificate is Issue, ready for a tls.Config.
func (ca *CA) TLSCertificate(now time.Time, l Leaf) (tls.Certificate, error) {
	certPEM, keyPEM, err := ca.Issue(now, l)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// IssueFiles is Issue, written to <dir>/<name>.crt (0644) and
// <dir>/<name>.key (0600), making dir if needed.
func (ca *CA) IssueFiles(now time.Time, dir, name string, l Leaf) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := ca.Issue(now, l)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err == nil {
		err = keyutil.WriteKey(keyFile, keyPEM)
	}
	if err == nil {
		err = cert.WriteCert(certFile, certPEM)
	}
	return certFile, keyFile, err
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
}
