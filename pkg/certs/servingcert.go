package certs

import (
	"crypto/x509"
	"encoding/pem"

	"k8s.io/component-base/metrics"
)

// servingNotAfter is what a server presents, not what the controller
// wrote: it is there whether or not a controller runs, or leads.
var servingNotAfter = metrics.NewDesc(
	"group_metrics_server_serving_cert_not_after_timestamp_seconds",
	"Unix time at which the serving certificate this server presents expires, read from it at every scrape.",
	nil, nil, metrics.ALPHA, "")

// ServingCert is the certificate a server serves with, as
// k8s.io/apiserver's dynamiccertificates.CertKeyContentProvider gives it:
// PEM, the leaf first. Safe to call concurrently.
type ServingCert interface {
	CurrentCertKeyContent() (cert, key []byte)
}

// ServingCertCollector exports the expiry of the serving certificate a
// server presents. It is for the server's registry (the serving replicas),
// not the controller's: register it with
// legacyregistry.CustomMustRegister(certs.NewServingCertCollector(cert))
// where the server's serving certificate provider is built.
type ServingCertCollector struct {
	metrics.BaseStableCollector
	cert ServingCert
}

var _ metrics.StableCollector = &ServingCertCollector{}

// NewServingCertCollector returns a collector of cert, the provider the
// server serves with (api.SecureServing.Cert, which follows the files as
// they change).
func NewServingCertCollector(cert ServingCert) *ServingCertCollector {
	return &ServingCertCollector{cert: cert}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *ServingCertCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- servingNotAfter
}

// CollectWithStability implements metrics.StableCollector: nothing while
// no certificate is loaded or its first block does not parse, so that an
// alert on the series sees it absent rather than expired.
func (c *ServingCertCollector) CollectWithStability(ch chan<- metrics.Metric) {
	certPEM, _ := c.cert.CurrentCertKeyContent()
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return
	}
	ch <- metrics.NewLazyConstMetric(servingNotAfter, metrics.GaugeValue, float64(leaf.NotAfter.Unix()))
}
