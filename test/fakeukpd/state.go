package fakeukpd

// State is how a fake ukpd running as its own process (the fake-ukpd
// command's --state-file) tells its users where it serves; read it with
// fakecore.ReadState.
type State struct {
	URL            string `json:"url"`
	ControlAddress string `json:"controlAddress"`
	CAFile         string `json:"caFile,omitempty"`
}
