// Command fake-ukpd runs a fake ukpd (the Unikraft platform daemon) on a
// local address, with a plain-HTTP control API on loopback.
package main

func main() { newCommand().Main() }
