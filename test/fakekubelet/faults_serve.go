package fakekubelet

import (
	"net/http"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// serveFault applies the node's response faults to a request. It reports
// whether the request was answered (or abandoned) by a fault.
func (n *Node) serveFault(w http.ResponseWriter, r *http.Request, path string) bool {
	faults := n.Faults()
	rs := fakecore.Responder{Clock: n.fleet.cfg.Clock, Stop: n.ep.Stopped()}
	if faults.Delay.Duration > 0 {
		rs.Wait(r.Context(), faults.Delay.Duration)
	}
	if faults.Response == "" {
		return false
	}
	f := fakecore.Format{
		ContentType: "application/json",
		Status500: func(w http.ResponseWriter) {
			http.Error(w, "Internal Error: failed to get node info: fake kubelet fault", http.StatusInternalServerError)
		},
		Garbage:     `{"node":{"nodeName":"` + n.name + `","cpu":{"time":"yesterday","usageNanoCores":-"}},"pods":[{` + "\x00\xff",
		StallPrefix: `{"node":{"nodeName":"` + n.name + `",`,
		Render: func() (int, []byte) {
			return http.StatusOK, n.render(r, path, false).body
		},
	}
	if path != summaryPath {
		f.ContentType = ResourceMetricsContentType
		f.Garbage = "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total{ 1.0.0 not-a-number\n\x00\xff"
		f.StallPrefix = "# HELP "
	}
	return rs.Serve(w, r, faults.Response, faults.HugeBodyBytes, f)
}
