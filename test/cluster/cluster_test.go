package cluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/yaml"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

func TestClusterPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newClusterPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	tests := []struct {
		name, certFile string
		identity       string // instead of certFile, a clientIdentities entry
		roots          *pki.CA
		usage          x509.ExtKeyUsage
		host, wantCN   string
		wantOrgs       []string
	}{
		{"apiserver by IP", p.file("apiserver.crt"), "", p.ca, server, "127.0.0.1", "kube-apiserver", nil},
		{"apiserver by service name", p.file("apiserver.crt"), "", p.ca, server, "kubernetes.default.svc", "kube-apiserver", nil},
		{"scheduler serving", p.file("scheduler-serving.crt"), "", p.ca, server, "localhost", "kube-scheduler", nil},
		{"front-proxy client", p.file("front-proxy-client.crt"), "", p.frontProxyCA, client, "", "front-proxy-client", nil},
		{"admin client", "", "admin", p.ca, client, "", "kubernetes-admin", []string{"system:masters"}},
		{"controller-manager client", "", "kube-controller-manager", p.ca, client, "", "system:kube-controller-manager", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, err := os.ReadFile(tt.certFile)
			if tt.identity != "" {
				certPEM, _, err = p.ca.Issue(time.Now(), clientIdentities[tt.identity])
			}
			if err != nil {
				t.Fatal(err)
			}
			certs, err := certutil.ParseCertsPEM(certPEM)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(tt.roots.CertPEM())
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}}); err != nil {
				t.Errorf("verify: %v", err)
			}
			subject := certs[0].Subject
			if diff := cmp.Diff([]any{tt.wantCN, tt.wantOrgs}, []any{subject.CommonName, subject.Organization}); diff != "" {
				t.Errorf("CN and organizations (-want +got):\n%s", diff)
			}
		})
	}
	if info, err := os.Stat(p.file("sa.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("service-account key: %v, mode %v", err, info.Mode())
	}
}

func TestKwokConfig(t *testing.T) {
	// kwok's own stages come from its source; stand-ins here.
	src := t.TempDir()
	for name, file := range map[string]string{"node-initialize": "node/fast/node-initialize.yaml", "pod-ready": "pod/fast/pod-ready.yaml"} {
		path := filepath.Join(src, "kustomize", "stage", filepath.FromSlash(file))
		stage := "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: " + name
		if err := errors.Join(os.MkdirAll(filepath.Dir(path), 0o755), os.WriteFile(path, []byte(stage), 0o644)); err != nil {
			t.Fatal(err)
		}
	}
	stages, err := kwokStages(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kwokConfig("127.16.0.0/16", "127.0.0.1:12345", KwokNodeAnnotationValue, stages)
	var kinds []string
	var options map[string]any
	for _, raw := range strings.Split(cfg, "---\n") {
		var doc struct {
			Kind     string
			Metadata struct{ Name string }
			Options  map[string]any
		}
		if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
			t.Fatalf("decode kwok config: %v", err)
		}
		if doc.Kind == "Stage" {
			doc.Kind += "/" + doc.Metadata.Name
		} else {
			options = doc.Options
		}
		kinds = append(kinds, doc.Kind)
	}
	want := []string{"KwokConfiguration", "Stage/node-initialize", "Stage/pod-ready", "Stage/pod-delete"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("documents (-want +got):\n%s", diff)
	}
	for _, key := range []string{"nodeLeaseParallelism", "nodePlayStageParallelism", "podPlayStageParallelism", "podsOnNodeSyncParallelism", "nodeLeaseDurationSeconds"} {
		if n, _ := options[key].(float64); n <= 0 {
			t.Errorf("option %s = %v, want > 0", key, options[key])
		}
	}
	for key, want := range map[string]string{"manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake", "serverAddress": "127.0.0.1:12345"} {
		if options[key] != want {
			t.Errorf("%s = %v, want %s", key, options[key], want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	bins := func(names ...string) string {
		dir := t.TempDir()
		for _, b := range names {
			if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	binDir := bins(EtcdBinary, APIServerBinary, ControllerManagerBinary, SchedulerBinary, KubectlBinary, KwokBinary)
	kubeDir, onlyEtcdKwok := t.TempDir(), bins(EtcdBinary, KwokBinary)
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{name: "valid", opts: Options{BinDir: binDir}},
		{name: "no bin dir", opts: Options{}, wantErr: []string{"BinDir is required"}},
		{name: "missing binaries", opts: Options{BinDir: t.TempDir()}, wantErr: []string{"etcd", "kube-apiserver", "kwok"}},
		{
			// etcd and kwok stay in BinDir; the Kubernetes binaries must be
			// in KubeBinDir.
			name:    "kube binaries looked up in KubeBinDir",
			opts:    Options{BinDir: binDir, KubeBinDir: kubeDir},
			wantErr: []string{filepath.Join(kubeDir, "kube-apiserver"), filepath.Join(kubeDir, "kubectl"), filepath.Join(kubeDir, "kube-scheduler")},
		},
		{name: "KubeBinDir with every kube binary", opts: Options{BinDir: onlyEtcdKwok, KubeBinDir: binDir}},
		{
			name:    "every negative duration is reported",
			opts:    Options{BinDir: binDir, HPASyncPeriod: -time.Second, HPAInitialReadinessDelay: -time.Second},
			wantErr: []string{"HPASyncPeriod", "HPAInitialReadinessDelay"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.withDefaults().validate()
			if (err != nil) != (len(tt.wantErr) > 0) {
				t.Fatalf("error %v, want one mentioning %v", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestProcessStopKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// The shell ignores SIGTERM, so Stop has to escalate; its child must die
	// with it because it shares the process group.
	script := `trap '' TERM; sleep 300 & echo $! > ` + pidFile + `; wait`
	p, err := startProcess("sh", filepath.Join(dir, "sh.log"), 200*time.Millisecond, nil, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	var childPid int
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if data, err := os.ReadFile(pidFile); err == nil && bytes.HasSuffix(data, []byte("\n")) {
			childPid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
		return childPid != 0, nil
	}); err != nil {
		t.Fatal("child did not start")
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	// SIGKILL is delivered asynchronously; give the child a moment to go.
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !alive(childPid), nil
	}); err != nil {
		t.Fatalf("child %d is still alive after Stop", childPid)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// alive reports whether pid names a process that has not exited. A zombie
// (exited, waiting to be reaped by its new parent) counts as exited.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		n    int
		want string
	}{
		{name: "last two", n: 2, want: "c\nd"},
		{name: "more than there are", n: 10, want: "a\nb\nc\nd"},
		{name: "none", n: 0, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tailFile(path, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("tail (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(context.Background(), "the third call", nil, func(context.Context) error {
		if calls++; calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, calls)
	}

	// A watched process that exits ends the wait at once, long before the
	// context's deadline, naming the process and the check's last error.
	dir := t.TempDir()
	p, err := startProcess("quitter", filepath.Join(dir, "quitter.log"), time.Second, nil, "/bin/sh", "-c", "exit 3")
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	err = Poll(long, "a process that quit", []*Process{p}, func(context.Context) error { return errors.New("not yet") })
	if err == nil || long.Err() != nil || !strings.Contains(err.Error(), "quitter exited: exit status 3") || !strings.Contains(err.Error(), "not yet") {
		t.Errorf("Poll with an exited process = %v", err)
	}

	// Otherwise the context's end does, with the check's last error.
	ctx, cancel := context.WithTimeout(context.Background(), 3*PollInterval)
	defer cancel()
	err = Poll(ctx, "a check that never passes", nil, func(context.Context) error { return errors.New("still failing") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still failing") {
		t.Errorf("Poll past its deadline = %v", err)
	}
}
