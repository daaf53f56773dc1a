// Package netns builds small private test networks out of named network
// namespaces and veth pairs, for uroce's privileged tests and its demo.
//
// A Namespace is created with New (a unique name under /run/netns, like
// `ip netns add`) and removed with Delete. AddVeth joins two namespaces with a
// veth pair; the Namespace methods set MTUs, addresses, link state and
// sysctls; Do runs a function with the calling goroutine's OS thread switched
// into a namespace, which is how sockets, AF_XDP bindings and XDP attachments
// are made inside it. NewPair does all of it at once: two namespaces, one veth
// pair, documentation addresses, ARP and IPv6 duplicate-address detection
// tuned for tests.
//
// Configuration goes through the iproute2 `ip` command. Addresses are
// restricted to the documentation ranges 192.0.2.0/24, 198.51.100.0/24 and
// 2001:db8::/32, and the namespaces get no uplink, so nothing built here can
// reach a real network.
//
// Package netnstest wraps these for tests: it skips without root, `ip` or
// AF_XDP, and removes everything with t.Cleanup.
package netns
