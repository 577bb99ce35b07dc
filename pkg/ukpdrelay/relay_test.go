package ukpdrelay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
)

const (
	instanceUUID = "0b0e2f3c-5a1d-4c3e-9f00-1234567890ab"
	listJSON     = `{"status":"success","data":{"instances":[{"uuid":"` + instanceUUID + `","name":"web"}]}}`
	metricsText  = "# TYPE instance_cpu_time_s counter\ninstance_cpu_time_s{instance_uuid=\"" + instanceUUID + "\"} 1.5\n"
	metricsJSON  = `{"status":"success","data":{"instances":[{"uuid":"` + instanceUUID + `","cpu_time_ms":1500}]}}`
	textType     = "text/plain; version=0.0.4"
)

// ukpdAnswer answers as ukpd does: the list in JSON, the metrics in text
// unless JSON is asked for.
func ukpdAnswer(_ *env, w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == instancesPath:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, listJSON)
	case strings.Contains(r.Header.Get("Accept"), "json"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, metricsJSON)
	default:
		w.Header().Set("Content-Type", textType)
		_, _ = io.WriteString(w, metricsText)
	}
}

// answerWith answers every request with code, content type (none when
// empty: the key is set to nil so net/http does not sniff one) and body.
func answerWith(code int, contentType, body string) func(*env, http.ResponseWriter, *http.Request) {
	return func(_ *env, w http.ResponseWriter, _ *http.Request) {
		if contentType == "" {
			w.Header()["Content-Type"] = nil
		} else {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// upstreamSeen is a request ukpd should receive: with ukpd's token.
func upstreamSeen(path, query, accept string) seen {
	return seen{Path: path, Query: query, Authorization: "Bearer " + upstreamToken, Accept: accept}
}

var jsonType = []string{"application/json"}

func TestRelay(t *testing.T) {
	logs := captureLogs(t)
	missingToken := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name, path, token, accept string
		method                    string                                         // GET when empty
		answer                    func(*env, http.ResponseWriter, *http.Request) // ukpdAnswer when nil
		cfg                       func(*Config)
		wantCode                  int
		// wantBody is the body relayed; wantMessage a part of the relay's
		// own error message, when set.
		wantBody, wantMessage string
		wantContentType       []string
		wantUpstream          []seen
	}{
		{name: "a page of the list is relayed with ukpd's token", path: "/v1/instances?count=100&from=" + instanceUUID, token: readerToken, accept: "application/json",
			wantCode: 200, wantBody: listJSON, wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(instancesPath, "count=100&from="+instanceUUID, "application/json")}},
		{name: "the list without a query", path: "/v1/instances", token: readerToken,
			wantCode: 200, wantBody: listJSON, wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(instancesPath, "", "")}},
		{name: "count at the bound, normalised", path: "/v1/instances?count=01000", token: readerToken,
			wantCode: 200, wantBody: listJSON, wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(instancesPath, "count=1000", "")}},
		{name: "the metrics in text", path: "/v1/instances/metrics", token: readerToken, accept: "text/plain",
			wantCode: 200, wantBody: metricsText, wantContentType: []string{textType},
			wantUpstream: []seen{upstreamSeen(metricsPath, "", "text/plain")}},
		{name: "the metrics in JSON", path: "/v1/instances/metrics", token: readerToken, accept: "application/json",
			wantCode: 200, wantBody: metricsJSON, wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(metricsPath, "", "application/json")}},
		{name: "no Content-Type from ukpd stays none", path: "/v1/instances/metrics", token: readerToken,
			answer:   answerWith(200, "", metricsJSON),
			wantCode: 200, wantBody: metricsJSON,
			wantUpstream: []seen{upstreamSeen(metricsPath, "", "")}},
		{name: "ukpd's own error is relayed", path: "/v1/instances", token: readerToken,
			answer:   answerWith(500, "application/json", `{"status":"error","message":"store down"}`),
			wantCode: 500, wantBody: `{"status":"error","message":"store down"}`, wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(instancesPath, "", "")}},
		{name: "a body at the cap is relayed", path: "/v1/instances/metrics", token: readerToken,
			answer: answerWith(200, textType, strings.Repeat("#", 1024)), cfg: func(c *Config) { c.MaxResponseBytes = 1024 },
			wantCode: 200, wantBody: strings.Repeat("#", 1024), wantContentType: []string{textType},
			wantUpstream: []seen{upstreamSeen(metricsPath, "", "")}},
		{name: "a body over the cap is 502", path: "/v1/instances/metrics", token: readerToken,
			answer: answerWith(200, textType, strings.Repeat("#", 1025)), cfg: func(c *Config) { c.MaxResponseBytes = 1024 },
			wantCode: 502, wantMessage: "larger than 1024 bytes, the relay's cap", wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(metricsPath, "", "")}},
		{name: "a redirect is not followed", path: "/v1/instances", token: readerToken,
			answer: func(e *env, w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, e.elsewhere.srv.URL+instancesPath, http.StatusFound)
			},
			wantCode: 502, wantMessage: "a redirect, which the relay does not follow", wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(instancesPath, "", "")}},
		{name: "ukpd refusing the relay's token is 502, not 401", path: "/v1/instances", token: readerToken,
			answer:   answerWith(401, "application/json", `{"status":"error","message":"unauthorized"}`),
			wantCode: 502, wantMessage: "ukpd refused the relay's token (401 Unauthorized)", wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(instancesPath, "", "")}},
		{name: "ukpd down", path: "/v1/instances", token: readerToken, cfg: func(c *Config) { c.Upstream = closedURL(t) },
			wantCode: 502, wantMessage: "did not answer GET /v1/instances (connection)", wantContentType: jsonType},
		{name: "ukpd too slow", path: "/v1/instances/metrics", token: readerToken,
			answer:   func(_ *env, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			cfg:      func(c *Config) { c.Timeout = 100 * time.Millisecond },
			wantCode: 504, wantMessage: "did not answer GET /v1/instances/metrics within 100ms", wantContentType: jsonType,
			wantUpstream: []seen{upstreamSeen(metricsPath, "", "")}},
		{name: "no token file", path: "/v1/instances", token: readerToken, cfg: func(c *Config) { c.TokenFile = missingToken },
			wantCode: 500, wantMessage: "cannot read ukpd's token", wantContentType: jsonType},
		{name: "no credentials", path: "/v1/instances",
			wantCode: 401, wantMessage: "Unauthorized", wantContentType: jsonType},
		{name: "a token nobody issued", path: "/v1/instances/metrics", token: "forged",
			wantCode: 401, wantMessage: "Unauthorized", wantContentType: jsonType},
		{name: "an unknown path without credentials", path: "/v1/images",
			wantCode: 401, wantMessage: "Unauthorized", wantContentType: jsonType},
		{name: "an identity without the grant", path: "/v1/instances/metrics", token: strangerToken,
			wantCode: 403, wantMessage: "Forbidden: " + strangerName + " may not get nodes/stats " + nodeName, wantContentType: jsonType},
		{name: "an identity without the grant, on /metrics", path: "/metrics", token: strangerToken,
			wantCode: 403, wantMessage: "may not get nodes/metrics " + nodeName, wantContentType: jsonType},
		{name: "an unknown path", path: "/v1/images", token: readerToken, wantCode: 404, wantMessage: "Not found", wantContentType: jsonType},
		{name: "the root", path: "/", token: readerToken, wantCode: 404, wantMessage: "Not found", wantContentType: jsonType},
		{name: "a trailing slash", path: "/v1/instances/", token: readerToken, wantCode: 404, wantMessage: "Not found", wantContentType: jsonType},
		{name: "dot segments are not resolved", path: "/v1/instances/metrics/../../images", token: readerToken, wantCode: 404, wantMessage: "Not found", wantContentType: jsonType},
		{name: "an instance by name", path: "/v1/instances/web", token: readerToken, wantCode: 404, wantMessage: "Not found", wantContentType: jsonType},
		{name: "POST", method: http.MethodPost, path: "/v1/instances", token: readerToken, wantCode: 405, wantMessage: "takes GET only", wantContentType: jsonType},
		{name: "DELETE", method: http.MethodDelete, path: "/v1/instances/metrics", token: readerToken, wantCode: 405, wantMessage: "takes GET only", wantContentType: jsonType},
		{name: "HEAD", method: http.MethodHead, path: "/v1/instances", token: readerToken, wantCode: 405, wantContentType: jsonType},
		{name: "count 0", path: "/v1/instances?count=0", token: readerToken, wantCode: 400, wantMessage: `count must be an integer from 1 to 1000, got "0"`, wantContentType: jsonType},
		{name: "count over the bound", path: "/v1/instances?count=1001", token: readerToken, wantCode: 400, wantMessage: "count must be", wantContentType: jsonType},
		{name: "count not a number", path: "/v1/instances?count=ten", token: readerToken, wantCode: 400, wantMessage: "count must be", wantContentType: jsonType},
		{name: "count twice", path: "/v1/instances?count=100&count=100", token: readerToken, wantCode: 400, wantMessage: "count given 2 times", wantContentType: jsonType},
		{name: "from empty", path: "/v1/instances?from=", token: readerToken, wantCode: 400, wantMessage: "from must be an instance's UUID", wantContentType: jsonType},
		{name: "from with a slash", path: "/v1/instances?from=..%2Fimages", token: readerToken, wantCode: 400, wantMessage: "from must be", wantContentType: jsonType},
		{name: "from too long", path: "/v1/instances?from=" + strings.Repeat("a", 65), token: readerToken, wantCode: 400, wantMessage: "from must be", wantContentType: jsonType},
		{name: "an unknown parameter", path: "/v1/instances?count=1&tags=x", token: readerToken, wantCode: 400, wantMessage: `unknown query parameter "tags"`, wantContentType: jsonType},
		{name: "a semicolon", path: "/v1/instances?count=1;from=x", token: readerToken, wantCode: 400, wantMessage: "malformed query", wantContentType: jsonType},
		{name: "a query on the metrics", path: "/v1/instances/metrics?format=json", token: readerToken, wantCode: 400, wantMessage: "takes no query", wantContentType: jsonType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.answer == nil {
				tc.answer = ukpdAnswer
			}
			e := newEnv(t, tc.answer, tc.cfg)
			label := pathLabel(strings.Split(tc.path, "?")[0])
			before := counterValue(t, label, tc.wantCode)
			got := e.do(t, cmp.Or(tc.method, http.MethodGet), tc.path, tc.token, tc.accept)

			if got.Code != tc.wantCode {
				t.Errorf("status %d, want %d; body %q", got.Code, tc.wantCode, got.Body)
			}
			checkDiff(t, "Content-Type", tc.wantContentType, got.Header["Content-Type"])
			switch {
			case tc.wantMessage != "":
				var b errorBody
				if err := json.Unmarshal([]byte(got.Body), &b); err != nil || b.Status != "error" || !strings.Contains(b.Message, tc.wantMessage) {
					t.Errorf("body %q, want ukpd's error envelope with a message containing %q", got.Body, tc.wantMessage)
				}
			case tc.wantCode < 300:
				checkDiff(t, "body", tc.wantBody, got.Body)
			}
			if tc.wantCode == http.StatusUnauthorized && got.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if tc.wantCode == http.StatusMethodNotAllowed && got.Header.Get("Allow") != http.MethodGet {
				t.Errorf("405 with Allow %q, want GET", got.Header.Get("Allow"))
			}
			if after := counterValue(t, label, tc.wantCode); after != before+1 {
				t.Errorf("requests_total{path=%q,code=\"%d\"} went from %v to %v, want one more", label, tc.wantCode, before, after)
			}

			upstream, headers := e.ukpd.requests()
			checkDiff(t, "requests to ukpd", tc.wantUpstream, upstream)
			h := fmt.Sprint(headers)
			if strings.Contains(h, readerToken) || strings.Contains(h, strangerToken) || strings.Contains(h, "forged") {
				t.Errorf("ukpd received the sender's credential: %s", h)
			}
			if elsewhere, _ := e.elsewhere.requests(); len(elsewhere) > 0 {
				t.Errorf("the redirect's target received %v", elsewhere)
			}
			if strings.Contains(fmt.Sprint(got.Header), upstreamToken) || strings.Contains(got.Body, upstreamToken) {
				t.Errorf("ukpd's token in the answer: %v %q", got.Header, got.Body)
			}
		})
	}
	for _, secret := range []string{upstreamToken, readerToken, strangerToken} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a token (%.6s...) in the log", secret)
		}
	}
}

func counterValue(t *testing.T, path string, code int) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(requests.WithLabelValues(path, strconv.Itoa(code)))
	must(t, err)
	return v
}
