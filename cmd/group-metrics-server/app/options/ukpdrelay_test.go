package options

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// validRelay returns relay options that pass Validate.
func validRelay() *UkpdRelayOptions {
	o := NewUkpdRelayOptions()
	o.SecureServing.ServerCert.CertKey.CertFile = "/tls/tls.crt"
	o.SecureServing.ServerCert.CertKey.KeyFile = "/tls/tls.key"
	o.UkpdTokenFile = "/var/run/ukpd/token"
	o.NodeName = "kraftlet-host-a"
	return o
}

func TestUkpdRelayValidate(t *testing.T) {
	tests := []struct {
		name  string
		mut   func(o *UkpdRelayOptions) // changes validRelay; nil: NewUkpdRelayOptions as it is
		wants []string                  // substrings, one per expected error, in order
	}{
		{name: "complete", mut: func(*UkpdRelayOptions) {}},
		{name: "ukpd on IPv6 loopback over https",
			mut: func(o *UkpdRelayOptions) { o.UkpdURL, o.UkpdCAFile = "https://[::1]:45232", "/ukpd/ca.crt" }},
		{name: "the defaults lack what only the host knows",
			wants: []string{"--tls-cert-file and --tls-private-key-file are required", "--ukpd-token-file is required", "--node-name is required"}},
		{name: "ukpd on a routable address", mut: func(o *UkpdRelayOptions) { o.UkpdURL = "http://10.0.0.5:45232" },
			wants: []string{"--ukpd-url: ukpd endpoint http://10.0.0.5:45232: the host must be loopback"}},
		{name: "ukpd by a host name", mut: func(o *UkpdRelayOptions) { o.UkpdURL = "http://ukpd.internal:45232" },
			wants: []string{"the host must be loopback"}},
		{name: "credentials in the ukpd URL", mut: func(o *UkpdRelayOptions) { o.UkpdURL = "http://u:secret@127.0.0.1:45232" },
			wants: []string{"--ukpd-url: ukpd endpoint http://127.0.0.1:45232: credentials in the URL are not supported"}},
		{name: "every problem is reported", mut: func(o *UkpdRelayOptions) {
			o.SecureServing.BindPort, o.SecureServing.ServerCert.CertKey.KeyFile = 70000, ""
			o.UkpdURL, o.UkpdTokenFile, o.NodeName = "ftp://127.0.0.1", "", "Kraftlet_A"
			o.UkpdRequestTimeout, o.UkpdMaxResponseBytes = 0, 10
		}, wants: []string{
			"--secure-port 70000 must be between 1 and 65535",
			"--tls-cert-file and --tls-private-key-file are required",
			"--ukpd-url: ukpd endpoint ftp://127.0.0.1: scheme must be http or https",
			"--ukpd-token-file is required",
			`--node-name "Kraftlet_A" is not a node name`,
			"--ukpd-request-timeout must be positive",
			"--ukpd-max-response-bytes must be at least 1024",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewUkpdRelayOptions()
			if tc.mut != nil {
				o = validRelay()
				tc.mut(o)
			}
			errs := o.Validate()
			checkErrors(t, errs, tc.wants, strings.Contains)
			for _, err := range errs {
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("an error quotes the URL's credentials: %v", err)
				}
			}
		})
	}
}

const (
	relayNode   = "kraftlet-host-a"
	serverToken = "server-sa-token"
	serverUser  = "system:serviceaccount:kube-system:group-metrics-server"
	viewerToken = "viewer-token"
	viewerUser  = "system:serviceaccount:default:viewer"
)

// reviews is a cluster's TokenReview and SubjectAccessReview API, served on
// loopback: it knows two tokens and grants the server nodes/stats of
// relayNode, as manifests/base/rbac.yaml does. (client-go's fake clientset
// will not do: the delegating webhooks post through the typed client's
// RESTClient, which the fake lacks.)
type reviews struct {
	mu     sync.Mutex
	tokens []string
	sars   []authorizationv1.SubjectAccessReviewSpec
}

// client starts the API and returns a client of it.
func (r *reviews) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	users := map[string]string{serverToken: serverUser, viewerToken: viewerUser}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var out any
		switch req.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			if err := json.NewDecoder(req.Body).Decode(&tr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.mu.Lock()
			r.tokens = append(r.tokens, tr.Spec.Token)
			r.mu.Unlock()
			if name, ok := users[tr.Spec.Token]; ok {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name}}
			}
			out = &tr
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(req.Body).Decode(&sar); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.mu.Lock()
			r.sars = append(r.sars, sar.Spec)
			r.mu.Unlock()
			ra := sar.Spec.ResourceAttributes
			sar.Status.Allowed = sar.Spec.User == serverUser && ra != nil && ra.Verb == "get" && ra.Group == "" &&
				ra.Resource == "nodes" && ra.Subresource == "stats" && ra.Name == relayNode
			out = &sar
		default:
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	must(t, err)
	return kube
}

// TestUkpdRelayAdmission builds the relay with k8s.io/apiserver's delegating
// authenticator and authorizer on a fake cluster: the server's token is
// admitted, a token nobody issued is 401, an identity without the grant
// 403, and a second read is answered from the caches.
func TestUkpdRelayAdmission(t *testing.T) {
	ukpd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer ukpd-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"instances":[]}}`)
	}))
	t.Cleanup(ukpd.Close)
	o := validRelay()
	o.UkpdURL, o.UkpdTokenFile = ukpd.URL, writeFile(t, "token", "ukpd-token\n")
	r := &reviews{}
	relay, err := o.relay(r.client(t))
	must(t, err)
	srv := httptest.NewServer(relay)
	t.Cleanup(srv.Close)

	get := func(token string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/instances?count=100", nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		must(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	checkDiff(t, "statuses", []int{200, 200, 401, 403}, []int{get(serverToken), get(serverToken), get("forged"), get(viewerToken)})
	checkDiff(t, "tokens reviewed", []string{serverToken, "forged", viewerToken}, r.tokens)
	sar := func(user string) authorizationv1.SubjectAccessReviewSpec {
		return authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "get", Version: "v1", Resource: "nodes", Subresource: "stats", Name: relayNode}}
	}
	checkDiff(t, "access reviews", []authorizationv1.SubjectAccessReviewSpec{sar(serverUser), sar(viewerUser)}, r.sars)
}

// TestUkpdRelayServesTLS serves the relay with its pair from files, on
// loopback: /healthz answers without credentials, the rest asks for them.
func TestUkpdRelayServesTLS(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	must(t, err)
	o := validRelay()
	o.SecureServing.ServerCert.CertKey.CertFile = writeFile(t, "tls.crt", string(certPEM))
	o.SecureServing.ServerCert.CertKey.KeyFile = writeFile(t, "tls.key", string(keyPEM))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	o.SecureServing.Listener = ln
	relay, err := o.relay((&reviews{}).client(t))
	must(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- o.serve(ctx, relay) }()

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(certPEM) {
		t.Fatal("no certificate in the generated PEM")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	t.Cleanup(client.CloseIdleConnections)
	status := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+ln.Addr().String()+path, nil)
		must(t, err)
		resp, err := client.Do(req)
		must(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		must(t, err)
		return resp.StatusCode, string(body)
	}
	if code, body := status("/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz: %d %q, want 200 ok", code, body)
	}
	if code, _ := status("/v1/instances/metrics"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/instances/metrics without credentials: %d, want 401", code)
	}
	cancel()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}
