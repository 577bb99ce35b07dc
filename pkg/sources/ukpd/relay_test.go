package ukpd

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestRelayTargets: with relays on, every kraftlet node no endpoint owns
// is a target of its own at the node's address and the relays' port, sent
// the server's credential over TLS verified against the relays' CA; a node
// without an address is a target that fails as a connection failure; an
// endpoint keeps its state while the node's address stays, and is dropped
// when the node goes or moves.
func TestRelayTargets(t *testing.T) {
	RegisterMetrics()
	e := newEnv(t, nil) // stands for the relay of kraftlet-a: it admits testToken only
	host, portText, err := net.SplitHostPort(strings.TrimPrefix(e.srv.URL, "https://"))
	must(t, err)
	port, err := strconv.Atoi(portText)
	must(t, err)
	idx := podcache.NewNodeIndex()
	setNode := func(name, address string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kraftlet}}
		if address != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "ignored"}, {Type: corev1.NodeInternalIP, Address: address}}
		}
		idx.Set(podcache.NewNode(n))
	}
	setNode("kraftlet-a", host)
	setNode("kraftlet-b", "")
	setNode("kraftlet-c", "127.0.0.9")
	idx.Set(podcache.NewNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}))
	src, err := NewSource(SourceConfig{
		Endpoints: []EndpointConfig{{URL: "https://account.example", Nodes: []string{"kraftlet-c"}}},
		Nodes:     idx, Pods: podLister(t, newPod("default", "web-0", "kraftlet-a", "app")), Clock: e.clk,
		Relays: RelayConfig{Port: port, AddressTypes: []corev1.NodeAddressType{corev1.NodeInternalIP},
			REST: &rest.Config{BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{CAFile: e.caFile}}},
	})
	must(t, err)
	relayA := "ukpd/" + e.srv.URL
	targetsOf := func() map[string]sources.Target {
		t.Helper()
		targets, err := src.Targets()
		must(t, err)
		out := map[string]sources.Target{}
		for _, tg := range targets {
			if len(tg.Nodes()) != 1 {
				t.Fatalf("target %s owns %v, want one node", tg.ID(), tg.Nodes())
			}
			out[tg.ID()] = tg
		}
		return out
	}
	ids := func(m map[string]sources.Target) map[string]string {
		out := map[string]string{}
		for id, tg := range m {
			out[id] = tg.Nodes()[0]
		}
		return out
	}

	targets := targetsOf()
	checkDiff(t, "targets", map[string]string{
		"ukpd/https://account.example": "kraftlet-c", // the endpoint owns it
		relayA:                         "kraftlet-a",
		"ukpd/relay/kraftlet-b":        "kraftlet-b",
	}, ids(targets))

	e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "web-0", Container: "app", Node: "kraftlet-a", CPUCores: 0.5, RSSBytes: 64 << 20})
	e.clk.Step(5 * time.Second)
	b := scrapeOK(t, targets[relayA])
	if len(b.Pods) != 1 || b.Pods[0].Name != "web-0" {
		t.Errorf("the relay's scrape = %+v, want web-0", b.Pods)
	}
	if _, err := targets["ukpd/relay/kraftlet-b"].Scrape(t.Context()); sources.Reason(err) != sources.ReasonConnection {
		t.Errorf("a node without an address: %v, want a connection failure", err)
	}

	// The same address: the same endpoint, with what it learnt.
	again := targetsOf()
	if again[relayA].(*target).ep != targets[relayA].(*target).ep {
		t.Error("the relay's endpoint was rebuilt although the node's address stayed")
	}
	// kraftlet-a moves, kraftlet-b goes.
	setNode("kraftlet-a", "127.0.0.2")
	idx.Delete("kraftlet-b")
	moved := "ukpd/https://" + net.JoinHostPort("127.0.0.2", portText)
	checkDiff(t, "targets once kraftlet-a moved and kraftlet-b went", map[string]string{
		"ukpd/https://account.example": "kraftlet-c",
		moved:                          "kraftlet-a",
	}, ids(targetsOf()))
	if n := len(src.relays.byNode); n != 1 {
		t.Errorf("%d relay endpoints kept, want 1", n)
	}
}
