// Package incast is a congestion test bed: several senders and one receiver
// in their own network namespaces, joined by a bridge whose port toward the
// receiver is a rate-limited, ECN-marking bottleneck. Privileged tests and
// "uroce bench incast" build one with New, run their traffic through it,
// and read what the bottleneck did with QueueStats; Jain and Report turn
// per-flow counts into goodput, fairness and a printable table.
//
// # Topology
//
//	 sender s1                   switch                              receiver r
//	 Prefix-s1-PID-N             Prefix-sw-PID-N                     Prefix-r-PID-N
//	┌─────────────────┐         ┌────────────────────────────────┐  ┌─────────────────┐
//	│ veth0           ├──veth───┤ sw-s1 ──┐                      │  │ veth0           │
//	│ 192.0.2.11/24   │         │         │                      │  │ 192.0.2.2/24    │
//	└─────────────────┘         │         ├── br0 ──▶ sw-r ──────┼──┤                 │
//	 sender s2                  │         │    (bottleneck: the  │  └─────────────────┘
//	┌─────────────────┐         │         │     egress of sw-r)  │
//	│ veth0           ├──veth───┤ sw-s2 ──┤                      │
//	│ 192.0.2.12/24   │         │         │  tbf rate Bottleneck │
//	└─────────────────┘         │  ...  ──┘   └─ bfifo, red ecn  │
//	 ... sender sN:             │              or fq_codel ecn   │
//	 192.0.2.(10+N)/24          └────────────────────────────────┘
//
// Sender i (1 to Config.Senders, at most MaxSenders) is the namespace
// Prefix-sI-PID-N with interface HostDev ("veth0"), address SenderAddr(i)
// = 192.0.2.(10+i)/24 and MAC 02:00:c0:00:02:XX, XX being the address's
// last byte (0b for s1); its veth peer in the switch namespace is the
// bridge port SenderPort(i) = "sw-sI". The receiver is Prefix-r-PID-N with
// veth0 at ReceiverAddr = 192.0.2.2/24 (MAC 02:00:c0:00:02:02), its peer
// the port ReceiverPort = "sw-r". Prefix is "uroce-incast" by default; the
// process ID and a counter make every name unique (netns.New). Everything
// is on the one documentation subnet 192.0.2.0/24, with no uplink and no
// router. Close detaches the Step marker, if any, and deletes every
// namespace, and with them the bridge, the veth pairs and the qdiscs.
//
// Every interface has the bed's MTU and is up, the host ends with their
// address and MAC, the bridge ports enslaved to br0, as netns.NewPair leaves
// the two ends of a pair. Every namespace gets netns.TestSysctls (ARP
// answered only by the interface that owns the address) and has IPv6
// disabled, so the bottleneck carries nothing but the test's traffic: no
// router solicitations, no MLD. The senders and the receiver know each
// other's MAC address from permanent neighbour entries, and the bridge has
// a static forwarding entry for every host, so neither a full queue (which
// may drop ARP) nor a one-way flow (which lets a learned entry age out and
// the bridge flood) disturbs a run. The switch namespace turns bridge
// netfilter off.
//
// The host ends are where uroce's AF_XDP sockets attach, as on a
// netns.Pair. AF_XDP transmit bypasses the sender's own qdisc, but the
// frames reach the switch as ordinary packets, so the bottleneck queues,
// marks and drops them like any other.
//
// # The bottleneck
//
// Only the egress of sw-r limits the rate. The senders' interfaces, the
// ports toward the senders and the receiver's interface have no queue
// (veth's noqueue) and run as fast as the CPUs let them, so a sender's own
// egress is never the bottleneck and the return path (acknowledgements,
// CNPs) is never delayed, except by Config.Delay. The commands, run in the
// switch namespace (Bed.Commands lists them), are
//
//	tc qdisc add dev sw-r root handle 1: tbf rate RATEbit burst BURST limit LIMIT
//	tc qdisc replace dev sw-r parent 1:1 handle 10: CHILD
//
// with CHILD one of
//
//	bfifo limit LIMIT                                        TailDrop, Step
//	red limit LIMIT min MIN max MAX avpkt FRAME burst B \
//	    probability 1 bandwidth RATEbit ecn                  RED
//	fq_codel limit LIMIT/FRAME target T interval I \
//	    ce_threshold C quantum FRAME ecn                     FQCoDel
//
// and, when Config.Delay is set, `tc qdisc add dev sw-sI root handle 1:
// netem delay DELAY` on every port toward a sender.
//
// The thresholds scale with the bandwidth-delay product BDP = Bottleneck ×
// RTT / 8 bytes, RTT being NominalRTT (1 ms) plus Config.Delay: a userspace
// stack on shared CPUs answers within about a millisecond. At the default
// 500 Mbit/s and MTU 1500 (FRAME = 1514 bytes, what the qdiscs count), BDP
// is 62,500 bytes and:
//
//   - MIN = BDP/4 (15,625 bytes, about 10 frames, at least 2): marking
//     starts once a quarter of a round trip's worth of data waits. This is
//     where a DCTCP-style sender wants its signal (K ≥ C·RTT/7 keeps the
//     link busy while the senders back off), early enough that the queue,
//     and so the latency, stays well under one round trip.
//   - MAX = BDP (62,500 bytes, at least MIN + 2 frames) with probability 1:
//     RED's marking probability climbs linearly from 0 at MIN to 1 at
//     MAX, and every ECN-capable packet is marked above MAX (packets that
//     are not ECN-capable are dropped instead; `ecn` without `harddrop`).
//     A ramp over a whole BDP lets many senders see marks in proportion to
//     their share, instead of all at once.
//   - B = (2·MIN + MAX) / (3·FRAME) + 1 (21 packets), tc-red(8)'s rule:
//     it sets the weight of RED's moving average so that the average
//     follows the real queue within a few dozen packets, that is within a
//     fraction of a round trip at this rate; bandwidth tells RED how fast
//     the average decays while the queue is idle.
//   - LIMIT = 4·BDP (250,000 bytes, at least MAX + 8 frames): the tail-drop
//     point, a shallow switch buffer, far enough above MAX that marks, not
//     drops, govern ECN-capable traffic, and what a flow that ignores
//     marks meets.
//   - fq_codel: ce_threshold C = MIN's drain time (250 µs), the same
//     step as MIN in time, so fq_codel and RED signal at the same depth;
//     CoDel's target T = MAX's drain time (1 ms), interval I = 20·T
//     (20 ms).
//   - BURST = 250 µs at the rate (15,625 bytes, at least 2 frames, at most
//     64 KiB): what may leave back to back after an idle spell. It is at
//     most MIN at the nominal RTT, so bursts do not hide the first
//     threshold, and it lets tbf's timer fire up to 250 µs late (as it does
//     on busy, shared CPUs) without the link losing capacity. GSO packets
//     larger than BURST are split into segments by tbf before they queue.
//
// Config and Marking fields override each figure; Bed.Config returns those
// in force.
//
// # Marking disciplines and kernels
//
// TailDrop is a byte FIFO. RED needs sch_red, FQCoDel sch_fq_codel, Delay
// sch_netem; New fails with an error wrapping ErrUnsupported when the
// kernel lacks one, and tests skip. (The project's test machines run a
// kernel with tbf but without red, fq_codel or netem; the Debian kernel of
// test/rxe's guests has them all.)
//
// Step is DCTCP's step marking, for kernels without the marking qdiscs: a
// tc BPF program (tcx, Linux 6.6 or later) on the egress of sw-r, in front
// of tbf, sets CE on every ECN-capable packet that arrives while the port's
// qdisc holds MIN bytes or more, and counts it (Stats.Marks). It reads that
// backlog from the qdisc itself (skb->dev->qdisc->qstats.backlog, offsets
// from the kernel's BTF, with bpf_probe_read_kernel, so it needs root), so
// it marks on the real queue even when the machine cannot keep up with
// the configured rate. A packet the FIFO has no room for is neither marked
// nor counted; a GSO packet counts as the segments that fit. Packets that
// are not ECN-capable only meet the FIFO's tail drop. The program also adds
// up the backlog every packet finds (Stats.Arrivals, Stats.BacklogSum,
// Stats.MeanBacklog): the queue as the packets see it, not as one snapshot
// catches it. On a TailDrop bed the same program, marking nothing, measures
// it too, where the kernel can run it.
//
// # Statistics
//
// QueueStats parses `tc -s -j qdisc show dev sw-r` (the JSON of iproute2's
// print_qdisc): sent bytes and packets, drops, overlimits, requeues,
// backlog and queue length of the tbf root, which include its child's (a
// packet the child refuses or later drops is counted by the parent too),
// and the marks of the child: red's "marked", the larger of fq_codel's
// "ce_mark" and "ecn_mark" (a packet CoDel marks whose wait also exceeds
// ce_threshold counts in both), or the Step marker's counter. Counters
// count from New; Stats.Delta gives those of an interval.
//
// # Using the bed
//
// A test or a bench opens its sockets (kernel or AF_XDP) inside the host
// namespaces with Host.NS.Do, addresses the receiver at
// Receiver().Addr, and brackets its run with two QueueStats:
//
//	bed, err := incast.New(incast.Config{Senders: 4, Bottleneck: 1e9,
//		Marking: incast.Marking{Kind: incast.Step}})
//	if err != nil { ... } // errors.Is(err, incast.ErrUnsupported): skip
//	defer bed.Close()
//	// receiver: bed.Receiver().NS.Do(func() error { open and serve ... })
//	// senders:  for _, s := range bed.Senders() { s.NS.Do(...) }
//	before, _ := bed.QueueStats()
//	// ... run for d, counting what the receiver gets from each sender ...
//	after, _ := bed.QueueStats()
//	r := &incast.Report{Title: "uroce RC WRITE", Bottleneck: bed.Config().Bottleneck,
//		Marking: bed.Config().Marking.Kind, Duration: d, Flows: flows, Queue: after.Delta(before)}
//	r.WriteText(os.Stdout)
//
// Report.Carried tells whether the bottleneck ran at its rate: on shared
// CPUs a high Bottleneck can exceed what the machine forwards, and the run
// then measures the CPUs, not the queue. Nothing here starts a goroutine;
// a Bed's methods may be called from any goroutine.
package incast
