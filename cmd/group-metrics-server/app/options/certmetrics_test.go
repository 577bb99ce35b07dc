package options

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestServeCertMetrics(t *testing.T) {
	ctx := t.Context()
	addr, err := serveCertMetrics(ctx, "127.0.0.1:0", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	for _, want := range []string{"group_metrics_server_certs_syncs_total", "group_metrics_server_certs_last_sync_success_timestamp_seconds"} {
		if !strings.Contains(string(body), "# TYPE "+want+" ") {
			t.Errorf("/metrics has no family %s", want)
		}
	}
	// The same port a second time fails the start instead of serving
	// nothing.
	if _, err := serveCertMetrics(ctx, addr.String(), nil, nil); err == nil {
		t.Error("second listener on a taken port: no error")
	}
}

func TestCertControllerValidateMetricsAddress(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		wantErr bool
	}{
		{addr: ":8080"},
		{addr: ""},
		{addr: "127.0.0.1:9090"},
		{addr: "8080", wantErr: true},
	} {
		o := NewCertControllerOptions()
		o.MetricsBindAddress = tc.addr
		errs := o.Validate()
		if got := slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), "--metrics-bind-address") }); got != tc.wantErr {
			t.Errorf("--metrics-bind-address=%q: errors %v, want a --metrics-bind-address error: %v", tc.addr, errs, tc.wantErr)
		}
	}
}
