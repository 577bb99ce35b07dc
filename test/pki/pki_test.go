package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestIssue(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ca, err := NewCA("test-ca", now, 24*time.Hour)
	must(t, err)
	other, err := NewCA("other-ca", now, 24*time.Hour)
	must(t, err)
	tests := []struct {
		name      string
		leaf      Leaf
		usage     x509.ExtKeyUsage
		wantIPs   []string
		wantNames []string
	}{
		{name: "serving", leaf: Leaf{CommonName: "node-0", Hosts: []string{"127.0.0.1", "localhost", "node-0"}, Server: true},
			usage: x509.ExtKeyUsageServerAuth, wantIPs: []string{"127.0.0.1"}, wantNames: []string{"localhost", "node-0"}},
		{name: "client", leaf: Leaf{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true},
			usage: x509.ExtKeyUsageClientAuth},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := ca.TLSCertificate(now, tc.leaf)
			must(t, err)
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			must(t, err)
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			// IP SANs, DNS SANs, organizations
			want := [][]string{tc.wantIPs, tc.wantNames, tc.leaf.Organizations}
			if diff := cmp.Diff(want, [][]string{ips, leaf.DNSNames, leaf.Subject.Organization}); diff != "" {
				t.Errorf("SANs and organizations (-want +got):\n%s", diff)
			}
			for _, v := range []struct {
				what   string
				ca     *CA
				at     time.Time
				verify bool
			}{
				{"a verifier a little behind", ca, now.Add(-Backdate / 2), true},
				{"within the CA's life", ca, now.Add(23 * time.Hour), true},
				{"after the CA expired", ca, now.Add(25 * time.Hour), false},
				{"against another CA", other, now, false},
			} {
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(v.ca.CertPEM())
				_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: v.at, KeyUsages: []x509.ExtKeyUsage{tc.usage}})
				if (err == nil) != v.verify {
					t.Errorf("%s: verify error %v, want verified %v", v.what, err, v.verify)
				}
			}
		})
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := NewCA("files-ca", now, time.Hour)
	must(t, err)
	certFile, keyFile, err := ca.IssueFiles(now, dir, "server", Leaf{CommonName: "server", Hosts: []string{"::1"}, Server: true})
	must(t, err)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	must(t, err)
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv6loopback) {
		t.Errorf("IP SANs %v, want [::1]", leaf.IPAddresses)
	}
	for file, want := range map[string]os.FileMode{keyFile: 0o600, certFile: 0o644} {
		fi, err := os.Stat(file)
		must(t, err)
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(file), got, want)
		}
	}
}
