// Package bench measures what uroce gets out of a link next to what the
// link itself carries, in the same run, on the same kind of link: it is
// the library behind "uroce bench link".
//
// Link builds two network namespaces joined by a veth pair (package
// internal/netns) and runs two phases over it:
//
//   - raw: a device is opened on each end exactly as stack.Open does it
//     (the XDP program, one AF_XDP socket per queue, the same sizes and
//     flags) but with no engine (Config.Manual); one goroutine transmits
//     prebuilt RoCEv2 frames of the given size (RC RDMA WRITE First
//     packets, payload one path MTU) on A's link as fast as it takes them,
//     another receives and releases them on B's. No RoCE processing
//     happens: this is the AF_XDP frame rate of the link.
//   - RoCE: the devices are opened again with their engines, one RC QP
//     pair is connected, and RDMA WRITEs of the message size are posted
//     from A to B with a window of them in flight for the same duration.
//     Every packet is built, checksummed (ICRC), parsed, acknowledged and
//     placed in memory by the stack.
//
// The report gives both rates and their ratio: the RoCE goodput against
// the raw frame rate times the payload each frame would carry, so 100 %
// means uroce loses nothing to its protocol processing.
package bench
