//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// secrets are credentials the suite gives the servers it starts: the
// ServiceAccount token a server presents to kubelets (and to
// kube-apiserver), and the ukpd bearer token. None may appear in a log, an
// API answer or a self-metric.
type secrets struct {
	mu    sync.Mutex
	items []secret
}

type secret struct {
	name    string
	needles [][]byte
}

// minSecretLen keeps short strings, which could match by chance, out of the
// scan. Every credential the suite hands out is longer.
const minSecretLen = 12

// suiteSecrets collects credentials as the suite runs: they are read when
// the suite starts and again at the end, because a server deployed later
// rewrites the kubeconfig of the same ServiceAccount with a new token.
var suiteSecrets = &secrets{}

// add records value under name. A JWT is also looked for by its signature
// alone, which identifies it even when the rest is cut or re-encoded.
func (s *secrets) add(name, value string) {
	value = strings.TrimSpace(value)
	if len(value) < minSecretLen {
		return
	}
	needles := [][]byte{[]byte(value)}
	if parts := strings.Split(value, "."); len(parts) == 3 && len(parts[2]) >= minSecretLen {
		needles = append(needles, []byte(parts[2]))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if bytes.Equal(it.needles[0], needles[0]) {
			return
		}
	}
	s.items = append(s.items, secret{name: fmt.Sprintf("%s (%d bytes)", name, len(value)), needles: needles})
}

func (s *secrets) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// find returns the name of the first credential text holds, or "".
func (s *secrets) find(text string) string {
	name, _ := s.findBytes([]byte(text))
	return name
}

func (s *secrets) findBytes(b []byte) (name string, at int) {
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

// collect reads the credentials of the suite's servers: the ukpd token file
// and the kubeconfig of every group-metrics-server process, found in the
// command line each process log starts with.
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
	var kubeconfigs []string
	if suite.server != nil {
		kubeconfigs = append(kubeconfigs, flagValues(suite.server.Args, "--kubeconfig")...)
	}
	for _, p := range suite.cluster.Processes() {
		head, err := firstLine(p.LogPath())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if f := strings.Fields(head); len(f) > 1 && filepath.Base(f[1]) == env.ServerBinary {
			kubeconfigs = append(kubeconfigs, flagValues(f[2:], "--kubeconfig")...)
		}
	}
	for _, path := range kubeconfigs {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.add("the server's ServiceAccount token from "+filepath.Base(path), cfg.BearerToken)
	}
	return errors.Join(errs...)
}

func flagValues(args []string, flag string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

func firstLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 64<<10)
	n, err := f.Read(buf)
	if n == 0 && err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	return string(line), nil
}

// scanFiles looks for every credential in every file under dir and returns
// "<file>:<line>: holds <name>" for each file that holds one, and the
// number of files and bytes read.
func (s *secrets) scanFiles(dir string) (hits []string, files int, size int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isLog(path) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		size += int64(len(b))
		if name, at := s.findBytes(b); at >= 0 {
			line := bytes.Count(b[:at], []byte("\n")) + 1
			hits = append(hits, fmt.Sprintf("%s:%d: holds %s", path, line, name))
		}
		return nil
	})
	return hits, files, size, err
}

// isLog reports whether path is a log: every file under the cluster's log
// directory, and any *.log elsewhere (the credential files themselves sit
// in the work directory too).
func isLog(path string) bool {
	if suite.cluster != nil {
		if rel, err := filepath.Rel(suite.cluster.LogDir(), path); err == nil && !strings.HasPrefix(rel, "..") {
			return true
		}
	}
	return strings.HasSuffix(path, ".log")
}

// scrapeServer returns the server's answers to the paths a client or an operator
// reads: its self-metrics and the verbose health checks, which carry the
// sources' error messages.
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

// TestCredentialsNotLeaked rotates the ukpd token file to a token ukpd
// refuses, so that the server logs and counts authentication failures, puts
// the right token back, and then looks for every credential the suite gave
// the server in every process log so far and in the server's /metrics,
// /readyz?verbose and /livez?verbose. The scan of the logs runs again when
// the suite ends (main_test.go), after every test.
func TestCredentialsNotLeaked(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	if err := suiteSecrets.collect(); err != nil {
		t.Fatal(err)
	}
	if n := suiteSecrets.len(); n < 2 {
		t.Fatalf("found %d credentials to look for, want the ukpd token and at least one ServiceAccount token", n)
	}
	// The scanner finds what it looks for.
	planted := t.TempDir()
	suiteSecrets.mu.Lock()
	needle := suiteSecrets.items[0].needles[0]
	suiteSecrets.mu.Unlock()
	if err := os.WriteFile(filepath.Join(planted, "x.log"), append([]byte("one\ntwo "), needle...), 0o600); err != nil {
		t.Fatal(err)
	}
	if hits, _, _, err := suiteSecrets.scanFiles(planted); err != nil || len(hits) != 1 || !strings.Contains(hits[0], "x.log:2:") {
		t.Fatalf("scan of a planted credential: %v, %v; want one hit on line 2", hits, err)
	}

	wrongAuthFailures(ctx, t)

	answers, err := scrapeServer(ctx, suite.server)
	if err != nil {
		t.Fatal(err)
	}
	for p, body := range answers {
		if hit := suiteSecrets.find(body); hit != "" {
			t.Errorf("GET %s holds %s", p, hit)
		}
	}
	hits, files, size, err := suiteSecrets.scanFiles(suite.cluster.WorkDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		t.Errorf("credential in a log: %s", h)
	}
	t.Logf("%d credentials looked for in %d logs (%d bytes) and %d answers", suiteSecrets.len(), files, size, len(answers))
}

// wrongAuthFailures makes the server send a token ukpd refuses until the
// failure is counted, then restores the token and waits until the ukpd
// target is healthy again. The wrong token is a credential too. The ukpd
// endpoint is a scrape target only while it owns a node, so a kraftlet node
// stands in that time.
func wrongAuthFailures(ctx context.Context, t *testing.T) {
	t.Helper()
	const node = "e2e-security-kraftlet"
	if err := env.AddKraftletNode(ctx, suite.cluster, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := suite.cluster.Client().CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete node %s: %v", node, err)
		}
	})
	good, err := os.ReadFile(suite.ukpd.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	wrong := "e2e-refused-ukpd-token-" + randomHex(t)
	suiteSecrets.add("a ukpd token ukpd refuses", wrong)
	client, err := suite.server.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	base := suite.server.RESTConfig().Host
	before, err := ukpdMetric(ctx, client, base, `group_metrics_server_scraper_target_failures_total{reason="http_status",source="ukpd"}`)
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.WriteFile(suite.ukpd.TokenFile, good, 0o600); err != nil {
				t.Errorf("restore the ukpd token: %v", err)
			}
		}
	}
	t.Cleanup(restore)
	if err := os.WriteFile(suite.ukpd.TokenFile, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The token is read on every request: the next scrape sends it.
	bound := 2*suite.resolution + suite.timeout + 10*time.Second
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err = poll(waitCtx, "the server to count a refused ukpd scrape", func(ctx context.Context) error {
		n, err := ukpdMetric(ctx, client, base, `group_metrics_server_scraper_target_failures_total{reason="http_status",source="ukpd"}`)
		if err != nil {
			return err
		}
		if n <= before {
			return fmt.Errorf("ukpd http_status failures %v, still %v", n, before)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The failure is logged (once, as every failing target is), so the scan
	// covers an error about authentication.
	logged, err := linesWith(suite.server.Process.LogPath(), "ukpd", "401")
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) == 0 {
		t.Error("the server logged no line about ukpd answering 401")
	}
	t.Logf("the server logged %d line(s) about the refused token, e.g. %.300s", len(logged), strings.Join(logged, "\n"))
	restore()
	waitCtx2, cancel2 := context.WithTimeout(ctx, bound)
	defer cancel2()
	err = poll(waitCtx2, "the ukpd target to be healthy again", func(ctx context.Context) error {
		n, err := ukpdMetric(ctx, client, base, `group_metrics_server_scraper_targets{source="ukpd",state="healthy"}`)
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("no healthy ukpd target")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// linesWith returns the lines of the file at path that hold every word.
func linesWith(path string, words ...string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all && !strings.HasPrefix(line, "### ") {
			out = append(out, line)
		}
	}
	return out, nil
}

// ukpdMetric returns the value of one series of the server's /metrics, 0
// when it is absent.
func ukpdMetric(ctx context.Context, client *http.Client, base, series string) (float64, error) {
	code, body, err := env.Get(ctx, client, base+"/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %d: %.200s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// leakCheck is the scan that runs once every test has: newLeakCheck reads
// the credentials the suite's server started with, finish looks for them
// and any read since in every log and in a last scrape of the server.
type leakCheck struct{}

func newLeakCheck() *leakCheck {
	if err := suiteSecrets.collect(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: read credentials: %v\n", err)
	}
	return &leakCheck{}
}

// finish returns code, or 1 when a credential was found or the scan could
// not run. It names the file and line of every hit, never the credential.
func (l *leakCheck) finish(code int) int {
	if suite.cluster == nil {
		return code
	}
	failed := false
	fail := func(format string, args ...any) {
		failed = true
		fmt.Fprintf(os.Stderr, "e2e: credential scan: "+format+"\n", args...)
	}
	if err := suiteSecrets.collect(); err != nil {
		fail("read credentials: %v", err)
	}
	if suiteSecrets.len() == 0 {
		fail("no credentials to look for")
	}
	answers := 0
	if suite.server != nil {
		select {
		case <-suite.server.Process.Done():
			fmt.Fprintf(os.Stderr, "e2e: credential scan: the server has exited (%v); no final scrape\n", suite.server.Process.Err())
		default:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			got, err := scrapeServer(ctx, suite.server)
			cancel()
			if err != nil {
				fail("final scrape: %v", err)
			}
			for p, body := range got {
				answers++
				if hit := suiteSecrets.find(body); hit != "" {
					fail("GET %s holds %s", p, hit)
				}
			}
		}
	}
	hits, files, size, err := suiteSecrets.scanFiles(suite.cluster.WorkDir())
	if err != nil {
		fail("scan logs: %v", err)
	}
	for _, h := range hits {
		fail("credential in a log: %s", h)
	}
	if failed {
		return 1
	}
	fmt.Printf("e2e: credential scan: %d credentials, %d logs (%d bytes), %d answers: none found\n",
		suiteSecrets.len(), files, size, answers)
	return code
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func sha256Sum(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}
