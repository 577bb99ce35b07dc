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
	"os"
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
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate key of CA %s: %w", commonName, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %s: %w", commonName, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA %s: %w", commonName, err)
	}
	return &CA{cert: c, key: key, certPEM: encodeCert(der)}, nil
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
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", l.CommonName, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: l.Organizations},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", l.CommonName, err)
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

// WriteCA writes the CA's certificate and key to <dir>/<name>.crt and
// <dir>/<name>.key, for processes that sign with it (kube-apiserver's
// client CA, kube-controller-manager's signer).
func (ca *CA) WriteCA(dir, name string) (certFile, keyFile string, err error) {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(ca.key)
	if err != nil {
		return "", "", fmt.Errorf("encode key of CA %s: %w", name, err)
	}
	return WritePair(dir, name, ca.certPEM, keyPEM)
}

// IssueFiles is Issue, written to <dir>/<name>.crt and <dir>/<name>.key.
func (ca *CA) IssueFiles(now time.Time, dir, name string, l Leaf) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := ca.Issue(now, l)
	if err != nil {
		return "", "", err
	}
	return WritePair(dir, name, certPEM, keyPEM)
}

// WritePair writes a certificate (0644) and its key (0600) to
// <dir>/<name>.crt and <dir>/<name>.key.
func WritePair(dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("write %s: %w", certFile, err)
	}
	return certFile, keyFile, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
}

// serial is a random 120-bit serial number; crypto/rand does not fail on
// the platforms Go supports.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("serial number: %v", err))
	}
	return n
}
