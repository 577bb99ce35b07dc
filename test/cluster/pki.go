package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is long enough for any test run and short enough that a
// forgotten work directory does not hold credentials that matter.
const certValidity = 7 * 24 * time.Hour

// authority is a certificate authority whose certificate and key live in PEM
// files under the cluster's PKI directory.
type authority struct {
	cert     *x509.Certificate
	key      crypto.Signer
	certFile string
	keyFile  string
}

// certRequest describes a leaf certificate to issue.
type certRequest struct {
	commonName    string
	organizations []string
	hosts         []string
	client        bool
	server        bool
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
}

// newAuthority creates a self-signed CA and writes <name>.crt and <name>.key
// into dir.
func newAuthority(dir, name string) (*authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", name, err)
	}
	caCert, err := cert.NewSelfSignedCACert(cert.Config{CommonName: name}, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign %s: %w", name, err)
	}
	ca := &authority{
		cert:     caCert,
		key:      key,
		certFile: filepath.Join(dir, name+".crt"),
		keyFile:  filepath.Join(dir, name+".key"),
	}
	if err := writeCertAndKey(ca.certFile, ca.keyFile, caCert.Raw, key); err != nil {
		return nil, err
	}
	return ca, nil
}

// certPEM returns the CA certificate in PEM form.
func (a *authority) certPEM() []byte {
	return pemCert(a.cert.Raw)
}

// issue signs a leaf certificate for req and writes <name>.crt and <name>.key
// into dir. It returns the two file paths.
func (a *authority) issue(dir, name string, req certRequest) (certFile, keyFile string, err error) {
	key, err := newKey()
	if err != nil {
		return "", "", fmt.Errorf("generate key for %s: %w", name, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return "", "", fmt.Errorf("serial number for %s: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.commonName, Organization: req.organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if req.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if req.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range req.hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return "", "", fmt.Errorf("sign certificate for %s: %w", name, err)
	}
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := writeCertAndKey(certFile, keyFile, der, key); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
}

func writeCertAndKey(certFile, keyFile string, der []byte, key crypto.Signer) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", keyFile, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, pemCert(der), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", certFile, err)
	}
	return nil
}

// writeServiceAccountKeys writes the key pair that signs service-account
// tokens: sa.key (private) and sa.pub (public).
func writeServiceAccountKeys(dir string) (privFile, pubFile string, err error) {
	key, err := newKey()
	if err != nil {
		return "", "", fmt.Errorf("generate service-account key: %w", err)
	}
	privPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return "", "", fmt.Errorf("encode service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", fmt.Errorf("encode service-account public key: %w", err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	privFile = filepath.Join(dir, "sa.key")
	pubFile = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(privFile, privPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write %s: %w", privFile, err)
	}
	if err := os.WriteFile(pubFile, pubPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("write %s: %w", pubFile, err)
	}
	return privFile, pubFile, nil
}
