package fakeukpd

import "github.com/group-metrics-server/group-metrics-server/test/fakecore"

// State is how a fake ukpd running as its own process (the fake-ukpd
// command's --state-file) tells its users where it serves.
type State struct {
	URL            string `json:"url"`
	ControlAddress string `json:"controlAddress"`
	CAFile         string `json:"caFile,omitempty"`
}

// ReadState reads a State from path; it fails until the fake has written
// it.
func ReadState(path string) (*State, error) { return fakecore.ReadState[State](path) }
