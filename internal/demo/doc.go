// Package demo is the library behind "uroce demo": a workload of every
// RDMA operation and transport between two uroce devices, with every byte
// checked, and (on Linux) the whole show around it: two network
// namespaces joined by a veth pair, a device on each end, a report.
//
// Exercise runs the workload between any two devices that reach each
// other: the two ends of an in-memory pipe, or two interfaces. For each
// operation it creates a fresh pair of QPs, times a number of operations
// one at a time (latency), then runs Count messages with a window of them
// in flight (throughput), and checks each message where it lands: in the
// peer's memory for WRITE, in the receive buffer for SEND and
// WRITE_WITH_IMM, in the local buffer for READ, and the returned values and
// the final word for the atomics. UC WRITE and UD SEND run in rounds whose
// messages are checked when they arrive; with faults injected, those that
// never arrive intact are counted as lost, as the unreliable transports
// allow.
//
// Run (Linux, root) builds the network with package internal/netns, opens
// a device in each namespace (the AF_XDP sockets, the XDP program and the
// netlink socket are created inside the namespace, by a thread switched
// into it, and stay bound to it while the engines run on other threads),
// runs Exercise, collects the counters and removes everything, also when
// the context is cancelled (Ctrl-C) or something fails.
package demo
