package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

var names = []string{"group-metrics-server.kube-system.svc"}

func cfg(client *fake.Clientset, clk *clocktesting.FakeClock, dns []string) SecretConfig {
	return SecretConfig{Secrets: client.CoreV1(), Namespace: "kube-system", Name: "tls", DNSNames: dns, Clock: clk}
}

func verify(t *testing.T, b *Bundle, dnsName string, at time.Time) {
	t.Helper()
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		t.Fatalf("pair: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CA) {
		t.Fatal("CA does not parse")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: pool, CurrentTime: at}); err != nil {
		t.Fatalf("serving certificate does not verify for %s: %v", dnsName, err)
	}
}

func TestLoadOrCreate(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	client := fake.NewClientset()

	first, err := LoadOrCreate(ctx, cfg(client, clk, names))
	if err != nil {
		t.Fatal(err)
	}
	verify(t, first, names[0], clk.Now())

	// A second replica gets the same bundle.
	second, err := LoadOrCreate(ctx, cfg(client, clk, names))
	if err != nil {
		t.Fatal(err)
	}
	if string(second.Cert) != string(first.Cert) || string(second.CA) != string(first.CA) {
		t.Fatal("second replica got a different bundle")
	}

	// A new DNS name renews the serving pair under the same CA.
	more := append([]string{"group-metrics-server.kube-system.svc.cluster.local"}, names...)
	renamed, err := LoadOrCreate(ctx, cfg(client, clk, more))
	if err != nil {
		t.Fatal(err)
	}
	if string(renamed.Cert) == string(first.Cert) || string(renamed.CA) != string(first.CA) {
		t.Fatal("adding a DNS name should renew the serving pair and keep the CA")
	}
	verify(t, renamed, more[0], clk.Now())

	// Near expiry the pair is renewed, still under the same CA.
	clk.Step(servingValidity - renewBefore + time.Hour)
	renewed, err := LoadOrCreate(ctx, cfg(client, clk, more))
	if err != nil {
		t.Fatal(err)
	}
	if string(renewed.Cert) == string(renamed.Cert) || string(renewed.CA) != string(first.CA) {
		t.Fatal("an expiring pair should be renewed under the same CA")
	}
	verify(t, renewed, more[0], clk.Now())
}

func TestLoadOrCreateLosesRace(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	client := fake.NewClientset()
	winner, err := newBundle(nil, nil, names, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Another replica creates the Secret between our get and our create.
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "tls"}, Data: winner.data()}
		if err := client.Tracker().Add(secret); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), "tls")
	})
	got, err := LoadOrCreate(ctx, cfg(client, clk, names))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Cert) != string(winner.Cert) {
		t.Fatal("the loser of a create race must use the winner's bundle")
	}
}
