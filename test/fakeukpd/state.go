package fakeukpd

import (
	"encoding/json"
	"fmt"
	"os"
)

// State is how a fake ukpd running as its own process (the fake-ukpd
// command's --state-file) tells its users where it serves.
type State struct {
	URL            string `json:"url"`
	ControlAddress string `json:"controlAddress"`
	CAFile         string `json:"caFile,omitempty"`
}

// ReadState reads a State from path; it fails until the fake has written
// it.
func ReadState(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}
