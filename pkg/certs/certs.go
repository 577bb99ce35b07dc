// Package certs provisions the server's serving certificate without manual
// steps: a self-signed CA and a serving pair kept in one Secret, so every
// replica serves the same certificate, and the CA written into the caBundle
// of the server's APIServices so the aggregator verifies it.
package certs

import (
	"context"
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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Keys of the Secret.
const (
	KeyCA   = "ca.crt"
	KeyCert = corev1.TLSCertKey
	KeyKey  = corev1.TLSPrivateKeyKey
	// KeyCAKey holds the CA's private key, so a replica can renew the
	// serving pair without changing the caBundle.
	KeyCAKey = "ca.key"
)

const (
	caValidity      = 10 * 365 * 24 * time.Hour
	servingValidity = 365 * 24 * time.Hour
	// renewBefore is how long before expiry a starting replica replaces the
	// serving pair.
	renewBefore = 30 * 24 * time.Hour
)

// Bundle is a CA and the serving pair it signed, PEM-encoded.
type Bundle struct {
	CA   []byte
	Cert []byte
	Key  []byte

	caKey []byte
}

// SecretConfig says where the bundle lives and what it must cover.
type SecretConfig struct {
	Secrets   corev1client.SecretsGetter
	Namespace string
	Name      string
	// DNSNames the serving certificate must cover, e.g.
	// group-metrics-server.kube-system.svc.
	DNSNames []string
	Clock    clock.PassiveClock
}

// LoadOrCreate returns the bundle stored in the Secret, creating the Secret
// when absent and renewing the serving pair when it nears expiry or misses a
// DNS name. Replicas starting together agree: a losing create or update
// reads the winner's bundle.
func LoadOrCreate(ctx context.Context, cfg SecretConfig) (*Bundle, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	secrets := cfg.Secrets.Secrets(cfg.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		s, err := secrets.Get(ctx, cfg.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			b, err := newBundle(nil, nil, cfg.DNSNames, cfg.Clock.Now())
			if err != nil {
				return nil, err
			}
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Namespace: cfg.Namespace},
				Type:       corev1.SecretTypeTLS,
				Data:       b.data(),
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("create secret %s/%s: %w", cfg.Namespace, cfg.Name, err)
			}
			klog.InfoS("Created serving certificate", "secret", klog.KRef(cfg.Namespace, cfg.Name))
			return b, nil
		case err != nil:
			return nil, fmt.Errorf("get secret %s/%s: %w", cfg.Namespace, cfg.Name, err)
		}

		b := &Bundle{CA: s.Data[KeyCA], Cert: s.Data[KeyCert], Key: s.Data[KeyKey]}
		why := b.needsRenewal(cfg.DNSNames, cfg.Clock.Now())
		if why == "" {
			return b, nil
		}
		caCert, caKey, err := parseCA(s.Data)
		if err != nil {
			klog.InfoS("Replacing unusable CA in secret", "secret", klog.KObj(s), "err", err)
		}
		nb, err := newBundle(caCert, caKey, cfg.DNSNames, cfg.Clock.Now())
		if err != nil {
			return nil, err
		}
		s = s.DeepCopy()
		s.Data = nb.data()
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("update secret %s/%s: %w", cfg.Namespace, cfg.Name, err)
		}
		klog.InfoS("Renewed serving certificate", "secret", klog.KObj(s), "reason", why)
		return nb, nil
	}
	return nil, fmt.Errorf("secret %s/%s: gave up after repeated conflicts", cfg.Namespace, cfg.Name)
}

func (b *Bundle) data() map[string][]byte {
	return map[string][]byte{KeyCA: b.CA, KeyCert: b.Cert, KeyKey: b.Key, KeyCAKey: b.caKey}
}

// needsRenewal says why the serving pair must be replaced, or "".
func (b *Bundle) needsRenewal(dnsNames []string, now time.Time) string {
	cert, err := parseCert(b.Cert)
	if err != nil {
		return err.Error()
	}
	if _, err := parseCert(b.CA); err != nil {
		return "CA: " + err.Error()
	}
	if now.Add(renewBefore).After(cert.NotAfter) {
		return "serving certificate expires " + cert.NotAfter.Format(time.RFC3339)
	}
	for _, n := range dnsNames {
		if !slices.Contains(cert.DNSNames, n) {
			return fmt.Sprintf("serving certificate does not cover %q", n)
		}
	}
	return ""
}

func parseCert(pemBytes []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// parseCA returns the CA of a stored bundle, if it can still sign.
func parseCA(data map[string][]byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	caCert, err := parseCert(data[KeyCA])
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(data[KeyCAKey])
	if block == nil {
		return nil, nil, errors.New("no CA key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return caCert, key, nil
}

// newBundle signs a serving pair for dnsNames, with the given CA or a new one.
func newBundle(caCert *x509.Certificate, caKey *ecdsa.PrivateKey, dnsNames []string, now time.Time) (*Bundle, error) {
	var err error
	if caCert == nil || now.Add(servingValidity).After(caCert.NotAfter) {
		caCert, caKey, err = newCA(now)
		if err != nil {
			return nil, err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: firstOr(dnsNames, "group-metrics-server")},
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(servingValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, err
	}
	return &Bundle{
		CA:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}),
		Cert:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		caKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKeyDER}),
	}, nil
}

func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("group-metrics-server-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}
