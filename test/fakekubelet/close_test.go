package fakekubelet

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// lingering returns the stacks of goroutines that serve or run fleet code,
// other than the calling test's own.
func lingering() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "fakekubelet.Test") && (strings.Contains(g, "fakekubelet.") || strings.Contains(g, "net/http.(*Server).Serve")) {
			out = append(out, g)
		}
	}
	return out
}

func TestCloseStopsEverything(t *testing.T) {
	f, err := NewFleet(Config{Tokens: []string{testToken}})
	must(t, err)
	var nodes []*Node
	for _, name := range []string{"a", "b", "c", "d"} {
		n, err := f.AddNode(name, 0)
		must(t, err)
		nodes = append(nodes, n)
	}
	c := newClient(t, f)
	mustGet(t, c, nodes[0], summaryPath)
	must(t, nodes[1].SetFault(Fault{Kind: fakecore.FaultStall}))
	must(t, nodes[2].SetFault(fakecore.Slow(time.Hour)))
	must(t, nodes[3].SetFault(Fault{Kind: FaultDead}))
	// Requests in flight on the stalled and the slow node.
	ended := make(chan struct{}, 2)
	for _, n := range nodes[1:3] {
		go func() {
			_, _, _ = get(t, c, n, summaryPath, bearerAuth)
			ended <- struct{}{}
		}()
	}
	// Close must return with both requests in flight or not yet arrived;
	// either way nothing of the fleet may be left running.
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		<-ended
	}
	var left []string
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, requestTimeout, true, func(context.Context) (bool, error) {
		left = lingering()
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
	}
	if _, err := f.AddNode("late", 0); err == nil {
		t.Error("AddNode after Close succeeded")
	}
}
