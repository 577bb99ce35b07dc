package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/keyutil"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// certValidity is long enough for any test run and short enough that a
// forgotten work directory does not hold credentials that matter.
const certValidity = 7 * 24 * time.Hour

// authority is a certificate authority whose certificate and key live in PEM
// files under the cluster's PKI directory.
type authority struct {
	ca       *pki.CA
	certFile string
	keyFile  string
}

// newAuthority creates a CA and writes <name>.crt and <name>.key into dir.
func newAuthority(dir, name string) (*authority, error) {
	ca, err := pki.NewCA(name, time.Now(), certValidity)
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := ca.WriteCA(dir, name)
	if err != nil {
		return nil, err
	}
	return &authority{ca: ca, certFile: certFile, keyFile: keyFile}, nil
}

// certPEM returns the CA certificate in PEM form.
func (a *authority) certPEM() []byte { return a.ca.CertPEM() }

// issue signs a leaf certificate and writes <name>.crt and <name>.key into
// dir. It returns the two file paths.
func (a *authority) issue(dir, name string, l pki.Leaf) (certFile, keyFile string, err error) {
	return a.ca.IssueFiles(time.Now(), dir, name, l)
}

// writeServiceAccountKeys writes the key pair that signs service-account
// tokens: sa.key (private) and sa.pub (public).
func writeServiceAccountKeys(dir string) (privFile, pubFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
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
