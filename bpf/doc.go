// Package bpf holds uroce's XDP steering program and its loader.
//
// The program takes RoCEv2 frames (UDP destination port 4791 over IPv4 or
// IPv6, with or without one 802.1Q tag; IPv4 options are skipped using the
// header length) out of the kernel's receive path and redirects each to the
// AF_XDP socket registered for the queue it arrived on. Everything else (ARP,
// neighbour discovery, ICMP, TCP, other UDP, IP fragments) goes on to the
// kernel, and so does RoCEv2 on a queue that has no socket registered:
// bpf_redirect_map is called with XDP_PASS as its fallback action.
//
// The program is written with cilium/ebpf's asm package, so building uroce
// needs no C compiler and no generated object files. It is loaded with
// BPF_F_XDP_HAS_FRAGS, which lets it attach to interfaces whose MTU exceeds a
// page (jumbo frames arrive in several buffers; the program only reads the
// headers, which are in the first).
//
// MAC Control frames (EtherType 0x8808: 802.3x PAUSE and 802.1Qbb PFC),
// tagged or not, go to the socket too, so that the stack honours a pause
// on links that deliver them to software (veth); NICs consume them in
// hardware.
//
// Attach uses BPF links (link.AttachXDP): the program is detached when the
// Program is closed or the process exits, and attaching fails, rather than
// replacing anything, when another XDP program is already on the interface.
//
// A Program serves one interface: its XSKMAP is indexed by queue number, and
// the kernel drops (rather than passes) a frame redirected to a socket bound
// to another interface. Load one Program per interface, register one socket
// per queue.
//
// For fault injection, SetDropEvery makes the program drop one RoCEv2 frame
// in n before it reaches the socket; Stats counts RoCEv2 frames seen and
// dropped.
package bpf
