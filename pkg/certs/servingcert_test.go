package certs

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/component-base/metrics/testutil"
)

// certContent is a provider of any bytes, parsed or not.
type certContent struct{ cert []byte }

func (certContent) Name() string                              { return "test" }
func (c certContent) CurrentCertKeyContent() ([]byte, []byte) { return c.cert, nil }

var (
	_ ServingCert = certContent{}
	_ ServingCert = dynamiccertificates.CertKeyContentProvider(nil)
)

func TestServingCertCollector(t *testing.T) {
	ca, err := NewAuthority(t0, 3*time.Hour)
	must(t, err)
	pair, err := ca.Issue([]string{dnsName}, t0, time.Hour)
	must(t, err)
	const name = "group_metrics_server_serving_cert_not_after_timestamp_seconds"
	tests := []struct {
		name string
		cert []byte
		want string
	}{
		{
			name: "the leaf's notAfter, not its CA's",
			cert: append(append([]byte{}, pair.CertPEM...), ca.CertPEM...),
			want: `
# HELP ` + name + ` [ALPHA] Unix time at which the serving certificate this server presents expires, read from it at every scrape.
# TYPE ` + name + ` gauge
` + name + ` ` + strconv.FormatInt(pair.Cert.NotAfter.Unix(), 10) + "\n",
		},
		{name: "none loaded: no series", cert: nil},
		{name: "not PEM: no series", cert: []byte("not a certificate")},
		{name: "a key first: no series", cert: pair.KeyPEM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewServingCertCollector(certContent{tt.cert})
			if err := testutil.CustomCollectAndCompare(c, strings.NewReader(tt.want), name); err != nil {
				t.Error(err)
			}
		})
	}
}
