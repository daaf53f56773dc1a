// Package stack is uroce's verbs API and its engine: devices, protection
// domains, memory regions, completion queues, shared receive queues,
// address handles and queue pairs with the semantics of ibverbs, bound to
// link queues that move Ethernet frames (an in-memory pipe, or AF_XDP).
//
//	dev, _ := stack.Open(ctx, stack.Config{Link: pipeEnd, MAC: mac, Addrs: addrs, Neighbors: nb})
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.RegisterMR(buf, stack.AccessLocalWrite|stack.AccessRemoteWrite)
//	cq, _ := dev.CreateCQ(256)
//	q, _ := pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 128, MaxRecvWR: 128})
//	q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite})
//	q.ToRTR(stack.RTRAttr{DestQPN: peerQPN, AH: stack.AHAttr{DGID: peerGID, SGIDIndex: 1}, RQPSN: peerPSN})
//	q.ToRTS(stack.RTSAttr{SQPSN: myPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1})
//	q.PostSend(&stack.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled,
//		SG: []stack.SGE{mr.SGE(0, 4096)}, Remote: stack.RemoteAddr{Addr: va, RKey: rkey}})
//	n := cq.Poll(wcs) // or cq.Wait(ctx)
//
// # Goroutines and ownership
//
// A device runs one engine per link queue. An engine is one goroutine
// (or, with Config.Manual, the caller of Device.Step) that runs to
// completion over a batch: it receives frames from its link, parses
// them, checks the ICRC and that they are addressed to the device,
// finds the destination QP by QPN and hands the packet to it, fires the
// QPs' due timers (a heap, no allocation), lets QPs with work send, and
// transmits the batch. When idle it sleeps in Link.Poll until a frame,
// a verbs call, or the next timer. Every QP belongs to one engine.
//
// The transport state of a QP (package qp, which has no locks) is only
// ever touched with the QP's mutex held: by its engine while it works on
// the QP, and by verbs calls (PostSend, PostRecv, Modify, Query) from
// application goroutines. Verbs calls never transmit: they queue work
// and kick the engine, which sends on its own goroutine. Packets a QP
// wants to emit during a verbs call (none in practice) are kept by the
// QP until the engine pumps it. Lock order: QP, then its SRQ, then a CQ;
// an engine holds at most one QP lock at a time.
//
// CQs, SRQs, MRs and the QP table have their own synchronisation, so all
// verbs are safe for concurrent use from many goroutines. Completions
// are delivered by engines into CQs; Poll never blocks and Wait blocks
// until a completion arrives or the context ends.
//
// Deregister and Destroy wait for the batch each engine is processing,
// so that afterwards no engine touches the memory or the QP.
//
// A region registered with RegisterMRBacked (the daemon's view of a
// client's own memory, through /proc/PID/mem) has no buffer: the engine
// reads one packet's bytes at a time from its Backing into a bounce
// buffer of its own, and writes back what the QP wrote there before it
// pushes a completion or transmits, and at the latest right after it
// lets go of the QP, inside the batch (backing.go).
//
// # The engine's own transmit policy
//
// The QPs coalesce their ACKs (qp.Caps.BatchAcks): the ACK a QP owes
// last waits in the QP, a later one replacing it, until the engine
// pumps the QP after the receive batch; small requests then cost one
// ACK per batch, not one each. The responses to a receive batch go out
// every 16 frames or 16 KiB (the engine asks the QP being served for
// them, SendResponses) rather than when the whole batch is done: a
// requester whose send window
// waits for them (Config.SendWindow, qp.Caps.SendWindow) keeps sending
// while the rest of the batch is processed, and the two ends work at the
// same time instead of taking turns. For the same reason an idle engine
// goes on polling its link for 50 µs before it sleeps.
//
// No frame goes to the link while the engine holds a QP's lock, so a
// verbs call on the QP never waits for a system call: a full transmit
// batch refuses packets, which the QP keeps (it stays busy), and the
// engine transmits the batch once it has let go of the QP, then pumps
// that QP again.
//
// With Config.KeepPastGap, each engine lends its RC QPs up to 256 frame
// buffers (allocated when first needed) to keep the requests that arrive
// after a lost one (qp.Env.Stash): after a loss a uroce requester then
// resends the lost packet and a probe only, not everything that followed
// it, while a go-back-N requester (rdma_rxe) sees ACKs no further than
// what it has resent (see package qp). Without it, the default, the
// responder drops them as the IBTA says.
//
// # Multiple queues
//
// A device may run several link queues (Config.Links, or the queues of
// an interface), one engine each. A QP starts on the engine its QPN
// names; an RC or UC QP moves, once connected, to the engine the pair
// of QP numbers names (QP.placeAtRTR), the pair its UDP source port is
// derived from: both ends compute it alike, so two uroce devices with
// as many queues agree on the queue of each QP whatever their QP
// numbers. A frame that arrives on another queue than its QP's is copied
// to the owning engine (counted as rcv_steered).
//
// # Links
//
// Link is the batch frame I/O interface (package link; stack.Link is the
// same type). An AF_XDP queue implements it (Config.Interface); pipe.New
// (package link/pipe) joins two devices in memory; fault.Wrap (package
// link/fault) wraps any link with seeded loss, duplication, reordering,
// corruption, delay and CE marking. A link that holds frames until a
// time (link.Dueer) tells the engine when.
//
// # Time
//
// The transport's timers run on Config.Clock. With a FakeClock and
// Config.Manual, a simulation steps devices and moves the clock to
// Device.NextDeadline when nothing else happens: runs are deterministic
// and replay from their seed.
package stack
