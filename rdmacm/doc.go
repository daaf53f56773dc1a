// Package rdmacm is uroce's RDMA connection manager API, in the spirit
// of librdmacm and net.Listener: Listen on a port of rdma_cm's TCP port
// space, Accept connection requests (with the peer's private data and
// addresses) or Reject them with private data, Dial an IP address and
// port with a context and private data, Close to disconnect, and Done
// to learn that the peer disconnected.
//
//	l, _ := rdmacm.Listen(dev, 7174)
//	r, _ := l.Accept(ctx)                  // RDMA_CM_EVENT_CONNECT_REQUEST
//	c, _ := r.Accept(qp, []byte("hello"))  // rdma_accept, then ESTABLISHED
//
//	c, err := rdmacm.Dial(ctx, dev, pd, netip.MustParseAddrPort("192.0.2.1:7174"), init, data)
//	var rej *rdmacm.RejectError            // RDMA_CM_EVENT_REJECTED
//	errors.Is(err, rdmacm.ErrUnreachable)  // RDMA_CM_EVENT_UNREACHABLE
//
// On the wire it is what the kernel's rdma_cm sends (IBTA vol 1 ch. 12
// and Annex A11): CM MADs on QP1, service ID 0x0000000001060000|port, a
// REQ whose private data starts with the 36-byte addressing header (IP
// version, source port, source and destination address) followed by
// the application's 56 bytes; REP and REJ private data are the
// application's own. A REQ for a port nobody listens on gets a REJ
// "invalid service ID" (8), as rdma_rxe's does.
//
// # Goroutines
//
// Each device has one Agent (AgentFor starts it on first use; NewAgent
// with a Config). The agent owns the device's QP1 (stack.QPInit{GSI:
// true}) and a cm.Machine, and runs one goroutine: it waits on QP1's CQ
// with the machine's next deadline as timeout, feeds received MADs
// (their source address taken from the GRH slot) and clock ticks to the
// machine, moves the active side's QP to RTR and RTS when the REP
// arrives, answers a peer's DREQ (QP to ERR, DREP) and wakes the
// goroutines waiting in Dial, Accept and Close. Application calls run
// the machine under the agent's mutex and post its MADs themselves. The
// goroutine ends with the device (Device.Close) or Agent.Close. The
// agent keeps time with the device's clock and sleeps for real time, so
// it needs a device with running engines (not Config.Manual).
package rdmacm
