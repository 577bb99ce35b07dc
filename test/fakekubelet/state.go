package fakekubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// StateFileName is the file in its --cert-dir where the fake-kubelet-fleet
// command writes its FleetState, last, once every node serves.
const StateFileName = "fleet.json"

// FleetState is how a fleet running as its own process tells its users
// (the demo, bench-compare) where it is.
type FleetState struct {
	ControlAddress string      `json:"controlAddress"`
	CAFile         string      `json:"caFile"`
	ClientCertFile string      `json:"clientCertFile"`
	ClientKeyFile  string      `json:"clientKeyFile"`
	Nodes          []FleetNode `json:"nodes"`
}

// FleetNode is one node of a FleetState.
type FleetNode struct {
	Name string `json:"name"`
	Port int    `json:"port"`
}

// ReadFleetState reads the FleetState in dir; it fails until the fleet has
// written it.
func ReadFleetState(dir string) (*FleetState, error) {
	data, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if err != nil {
		return nil, err
	}
	var s FleetState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", StateFileName, err)
	}
	return &s, nil
}
