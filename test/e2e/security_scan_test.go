//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/group-metrics-server/group-metrics-server/pkg/certs"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// secrets are credentials the suite gives the servers it starts (the ServiceAccount token a server presents
// to kubelets and kube-apiserver, the ukpd bearer token): none may appear in a log, an API answer or a
// self-metric.
type secrets struct {
	mu    sync.Mutex
	items []secret
}

type secret struct {
	name    string
	needles [][]byte
}

// suiteSecrets collects credentials as the suite runs: they are read when the suite starts and again at the
// end, because a server deployed later rewrites the kubeconfig of the same ServiceAccount with a new token.
var suiteSecrets = &secrets{}

// add records value under name. A JWT is also looked for by its signature alone, which identifies it even
// when the rest is cut or re-encoded. Short strings, which could match by chance, are left out: every
// credential the suite hands out is longer.
func (s *secrets) add(name, value string) {
	const minSecretLen = 12
	if value = strings.TrimSpace(value); len(value) < minSecretLen {
		return
	}
	needles := [][]byte{[]byte(value)}
	if parts := strings.Split(value, "."); len(parts) == 3 && len(parts[2]) >= minSecretLen {
		needles = append(needles, []byte(parts[2]))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.ContainsFunc(s.items, func(it secret) bool { return bytes.Equal(it.needles[0], needles[0]) }) {
		s.items = append(s.items, secret{name: fmt.Sprintf("%s (%d bytes)", name, len(value)), needles: needles})
	}
}

func (s *secrets) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// find returns the name of the first credential b holds and where, or -1.
func (s *secrets) find(b []byte) (name string, at int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		for _, n := range it.needles {
			if i := bytes.Index(b, n); i >= 0 {
				return it.name, i
			}
		}
	}
	return "", -1
}

// collect reads the credentials of the suite's servers: the ukpd token file, the kubeconfig of every
// group-metrics-server process, found in the command line each process log starts with, and the certificate
// controller's keys.
func (s *secrets) collect() error {
	var errs []error
	if suite.ukpd != nil {
		b, err := os.ReadFile(suite.ukpd.TokenFile)
		errs = append(errs, err)
		s.add("the ukpd token", string(b))
	}
	if suite.cluster == nil {
		return errors.Join(errs...)
	}
	var args []string
	if suite.server != nil {
		args = slices.Clone(suite.server.Args)
	}
	for _, p := range suite.cluster.Processes() {
		log, err := os.ReadFile(p.LogPath())
		errs = append(errs, err)
		head, _, _ := bytes.Cut(log, []byte("\n"))
		if f := strings.Fields(string(head)); len(f) > 1 && filepath.Base(f[1]) == env.ServerBinary {
			args = append(args, f[2:]...)
		}
	}
	for _, a := range args {
		if path, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			errs = append(errs, err)
			if err == nil {
				s.add("the server's ServiceAccount token from "+filepath.Base(path), cfg.BearerToken)
			}
		}
	}
	// A PEM key is looked for by the base64 lines of its body, which any print of it carries.
	for name, keys := range map[string][]string{
		"group-metrics-server-ca":           {certs.KeyCAKey, certs.KeyNextKey},
		"group-metrics-server-serving-cert": {certs.KeyServingKey},
	} {
		sec, err := suite.cluster.Client().CoreV1().Secrets("kube-system").Get(context.Background(), name, metav1.GetOptions{})
		errs = append(errs, err)
		if err != nil {
			continue
		}
		for _, k := range keys {
			for _, line := range strings.Split(string(sec.Data[k]), "\n") {
				if !strings.HasPrefix(line, "-----") {
					s.add("the "+k+" of Secret "+name, line)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// scan looks for every credential in answers and in every log under dir. It returns "GET <path> holds <name>"
// or "<file>:<line>: holds <name>" for each hit, never the credential, and what it looked through.
func (s *secrets) scan(dir string, answers map[string]string) (hits []string, summary string, err error) {
	for p, body := range answers {
		if name, at := s.find([]byte(body)); at >= 0 {
			hits = append(hits, fmt.Sprintf("GET %s holds %s", p, name))
		}
	}
	files, size := 0, 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isLog(path) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		size += len(b)
		if name, at := s.find(b); at >= 0 {
			line := bytes.Count(b[:at], []byte("\n")) + 1
			hits = append(hits, fmt.Sprintf("%s:%d: holds %s", path, line, name))
		}
		return nil
	})
	summary = fmt.Sprintf("%d credentials, %d logs (%d bytes), %d answers", s.len(), files, size, len(answers))
	return hits, summary, err
}

// isLog reports whether path is a log: every file under the cluster's log directory, and any *.log elsewhere
// (the credential files themselves sit in the work directory too).
func isLog(path string) bool {
	if suite.cluster != nil {
		if rel, err := filepath.Rel(suite.cluster.LogDir(), path); err == nil && !strings.HasPrefix(rel, "..") {
			return true
		}
	}
	return strings.HasSuffix(path, ".log")
}

// scrapeServer returns the server's answers to the paths an operator reads: its self-metrics and the verbose
// health checks, which carry the sources' error messages.
func scrapeServer(ctx context.Context, s *env.Server) (map[string]string, error) {
	client, err := s.HTTPClient()
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	out := map[string]string{}
	for _, p := range []string{"/metrics", "/readyz?verbose", "/livez?verbose"} {
		code, body, err := env.Get(ctx, client, s.RESTConfig().Host+p)
		if err != nil {
			return out, err
		}
		if p == "/metrics" && code != http.StatusOK {
			return out, fmt.Errorf("GET %s: %d: %.200s", p, code, body)
		}
		out[p] = body
	}
	return out, nil
}

// leakCheck is the scan that runs once every test has: newLeakCheck reads the credentials the suite's server
// started with, finish looks for them and any read since in every log and in a last scrape of the server.
type leakCheck struct{}

func newLeakCheck() *leakCheck {
	if err := suiteSecrets.collect(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: read credentials: %v\n", err)
	}
	return &leakCheck{}
}

// finish returns code, or 1 when a credential was found or the scan could not run.
func (l *leakCheck) finish(code int) int {
	if suite.cluster == nil {
		return code
	}
	var errs []error
	if err := suiteSecrets.collect(); err != nil {
		errs = append(errs, fmt.Errorf("read credentials: %w", err))
	}
	if suiteSecrets.len() == 0 {
		errs = append(errs, errors.New("no credentials to look for"))
	}
	var answers map[string]string
	if suite.server != nil {
		select {
		case <-suite.server.Process.Done():
			fmt.Fprintf(os.Stderr, "e2e: credential scan: the server has exited (%v); no final scrape\n", suite.server.Process.Err())
		default:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var err error
			if answers, err = scrapeServer(ctx, suite.server); err != nil {
				errs = append(errs, fmt.Errorf("final scrape: %w", err))
			}
			cancel()
		}
	}
	hits, summary, err := suiteSecrets.scan(suite.cluster.WorkDir(), answers)
	if err != nil {
		errs = append(errs, fmt.Errorf("scan logs: %w", err))
	}
	for _, h := range hits {
		errs = append(errs, errors.New(h))
	}
	if len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: credential scan:\n%v\n", errors.Join(errs...))
		return 1
	}
	fmt.Printf("e2e: credential scan: %s: none found\n", summary)
	return code
}

// TestCredentialsNotLeaked rotates the ukpd token to a refused one and back, and checks that no credential
// shows in a log, an answer or a self-metric.
func TestCredentialsNotLeaked(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	must(t, suiteSecrets.collect())
	if n := suiteSecrets.len(); n < 2 {
		t.Fatalf("found %d credentials to look for, want the ukpd token and at least one ServiceAccount token", n)
	}
	// The scanner finds what it looks for.
	planted := t.TempDir()
	suiteSecrets.mu.Lock()
	needle := suiteSecrets.items[0].needles[0]
	suiteSecrets.mu.Unlock()
	must(t, os.WriteFile(filepath.Join(planted, "x.log"), append([]byte("one\ntwo "), needle...), 0o600))
	if hits, _, err := suiteSecrets.scan(planted, nil); err != nil || len(hits) != 1 || !strings.Contains(hits[0], "x.log:2:") {
		t.Fatalf("scan of a planted credential: %v, %v; want one hit on line 2", hits, err)
	}

	wrongAuthFailures(ctx, t)

	answers, err := scrapeServer(ctx, suite.server)
	must(t, err)
	hits, summary, err := suiteSecrets.scan(suite.cluster.WorkDir(), answers)
	must(t, err)
	for _, h := range hits {
		t.Errorf("credential found: %s", h)
	}
	t.Logf("looked through %s", summary)
}

// wrongAuthFailures makes the server send a token ukpd refuses until the failure is counted, then restores
// the token and waits until the ukpd target is healthy again. The wrong token is a credential too. The ukpd
// endpoint is a scrape target only while it owns a node, so a kraftlet node stands in that time.
func wrongAuthFailures(ctx context.Context, t *testing.T) {
	t.Helper()
	const node = "e2e-security-kraftlet"
	addKraftletNode(ctx, t, node)
	good := readFile(t, suite.ukpd.TokenFile)
	wrong := "e2e-refused-ukpd-token-" + rand.Text()
	suiteSecrets.add("a ukpd token ukpd refuses", wrong)
	// The token is read on every request: the next scrape sends it.
	bound := 2*suite.resolution + suite.timeout + 10*time.Second
	failures := []string{"group_metrics_server_scraper_target_failures_total", `reason="http_status"`, `source="ukpd"`}
	before := mustMetric(ctx, t, suite.server, failures[0], failures[1:]...)
	restore := sync.OnceFunc(func() {
		if err := os.WriteFile(suite.ukpd.TokenFile, good, 0o600); err != nil {
			t.Errorf("restore the ukpd token: %v", err)
		}
	})
	t.Cleanup(restore)
	must(t, os.WriteFile(suite.ukpd.TokenFile, []byte(wrong+"\n"), 0o600))
	must(t, pollBounded(ctx, bound, "the server to count a refused ukpd scrape",
		metricCheck(suite.server, valueAtLeast(before+1), failures[0], failures[1:]...)))
	// The failure is logged (once, as every failing target is), so the scan covers an error about
	// authentication. The scraper counts a failure just before it logs it, so the line may trail the count:
	// wait for it, bounded as the log lines of checkFailingMember are.
	var logged []string
	if err := pollBounded(ctx, 10*time.Second, "the server to log ukpd answering 401", func(context.Context) error {
		var err error
		logged, err = linesWith(suite.server.Process.LogPath(), "ukpd", "401")
		return cmp.Or(err, wantf(len(logged) > 0, "the server logged no line about ukpd answering 401"))
	}); err != nil {
		t.Error(err)
	}
	t.Logf("the server logged %d line(s) about the refused token, e.g. %.300s", len(logged), strings.Join(logged, "\n"))
	restore()
	must(t, pollBounded(ctx, bound, "the ukpd target to be healthy again",
		metricCheck(suite.server, valueAtLeast(1), "group_metrics_server_scraper_targets", `source="ukpd"`, `state="healthy"`)))
}

// linesWith returns the lines of the file at path that hold every word.
func linesWith(path string, words ...string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return matchingLines(string(b), words...), nil
}

// matchingLines returns the lines of text that hold every word, but for the lines the harness writes into a
// log ("### ").
func matchingLines(text string, words ...string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		missing := slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) })
		if !missing && !strings.HasPrefix(line, "### ") {
			out = append(out, line)
		}
	}
	return out
}
