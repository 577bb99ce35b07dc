package fakekubelet

import (
	"path/filepath"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// StateFileName is the file in its --cert-dir where the fake-kubelet-fleet
// command writes its FleetState, last, once every node serves.
const StateFileName = "fleet.json"

// FleetState is how a fleet running as its own process tells its users
// (the demo, bench-compare) where it is.
type FleetState struct {
	ControlAddress string `json:"controlAddress"`
	CAFile         string `json:"caFile"`
	ClientCertFile string `json:"clientCertFile"`
	ClientKeyFile  string `json:"clientKeyFile"`
	// Nodes are the nodes as they were once every node served.
	Nodes []NodeState `json:"nodes"`
}

// ReadFleetState reads the FleetState in dir; it fails until the fleet has
// written it.
func ReadFleetState(dir string) (*FleetState, error) {
	return fakecore.ReadState[FleetState](filepath.Join(dir, StateFileName))
}
