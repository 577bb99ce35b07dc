// Command fake-kubelet-fleet runs a fleet of fake kubelets on 127.0.0.1,
// one TLS endpoint per node, with a plain-HTTP control API on loopback.
package main

func main() { newCommand().Main() }
