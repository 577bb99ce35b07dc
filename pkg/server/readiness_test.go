package server

import (
	"crypto/x509"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// fakeCA is a CA bundle that is loaded or not.
type fakeCA struct{ bundle []byte }

func (f *fakeCA) Name() string                   { return "fake" }
func (f *fakeCA) CurrentCABundleContent() []byte { return f.bundle }
func (f *fakeCA) VerifyOptions() (x509.VerifyOptions, bool) {
	return x509.VerifyOptions{}, len(f.bundle) > 0
}
func (f *fakeCA) AddListener(dynamiccertificates.Listener) {}

func TestAuthenticationReady(t *testing.T) {
	client, front := &fakeCA{}, &fakeCA{}
	api := &genericapiserver.RecommendedConfig{}
	api.SecureServing = &genericapiserver.SecureServingInfo{ClientCA: client}
	api.Authentication.RequestHeaderConfig = &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider: front,
		UsernameHeaders:   headerrequest.StaticStringSlice{"X-Remote-User"},
	}
	ready := authenticationReady(api)
	if err := ready(nil); err == nil {
		t.Fatal("ready before any CA is loaded")
	}
	client.bundle = []byte("ca")
	if err := ready(nil); err == nil {
		t.Fatal("ready before the front proxy CA is loaded")
	}
	front.bundle = []byte("ca")
	if err := ready(nil); err != nil {
		t.Fatalf("not ready with both CAs loaded: %v", err)
	}
	// Without delegated authentication there is nothing to wait for.
	if err := authenticationReady(&genericapiserver.RecommendedConfig{})(nil); err != nil {
		t.Fatalf("not ready without CAs to load: %v", err)
	}
}
