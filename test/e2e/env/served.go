package env

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// ServedCertificate opens a new connection to the server's address, as the
// aggregator would: verifying the server for ServiceHost against caBundle.
// It returns which of procs (replicas sharing the port) answered, and the
// certificate it served. A certificate that does not verify is an error.
func (s *Server) ServedCertificate(ctx context.Context, procs []*cluster.Process, caBundle []byte) (*cluster.Process, *x509.Certificate, error) {
	tlsCfg, err := rest.TLSConfigFor(s.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return nil, nil, errors.New("caBundle holds no certificate")
	}
	var served *x509.Certificate
	tlsCfg.RootCAs = pool
	tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
		served = cs.PeerCertificates[0]
		return nil
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &PinnedClient{Client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, Base: "https://" + s.Address()}
	p, err := c.Replica(ctx, procs)
	if err != nil {
		return nil, nil, err
	}
	return p, served, nil
}

// CABundle returns the caBundle of the APIService name.
func CABundle(ctx context.Context, c *cluster.Cluster, name string) ([]byte, error) {
	obj, err := c.APIServices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	b64, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle")
	return base64.StdEncoding.DecodeString(b64)
}
