//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCredentialsNotLeaked rotates the ukpd token to a refused one and back, and
// checks that no credential shows in a log, an answer or a self-metric.
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

// wrongAuthFailures makes the server send a token ukpd refuses until the
// failure is counted, then restores the token and waits until the ukpd
// target is healthy again. The wrong token is a credential too. The ukpd
// endpoint is a scrape target only while it owns a node, so a kraftlet node
// stands in that time.
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
	// The failure is logged (once, as every failing target is), so the scan
	// covers an error about authentication. The scraper counts a failure
	// just before it logs it, so the line may trail the count: wait for it,
	// bounded as the log lines of checkFailingMember are.
	var logged []string
	err := pollBounded(ctx, 10*time.Second, "the server to log ukpd answering 401", func(context.Context) error {
		var err error
		if logged, err = linesWith(suite.server.Process.LogPath(), "ukpd", "401"); err == nil && len(logged) == 0 {
			err = errors.New("the server logged no line about ukpd answering 401")
		}
		return err
	})
	if err != nil {
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

// matchingLines returns the lines of text that hold every word, but for
// the lines the harness writes into a log ("### ").
func matchingLines(text string, words ...string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		all := !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) })
		if all && !strings.HasPrefix(line, "### ") {
			out = append(out, line)
		}
	}
	return out
}
