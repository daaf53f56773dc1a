package replay

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/cm"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// CM sets the played end's connection up with a live peer's RDMA CM, as
// an rdma_cm client does (REQ, REP, RTU: the IBTA's chapter 12), at the
// frame level over the same link the replay then uses: it is a Player,
// run with Drive before the Session, and again after it to disconnect
// (Disconnect). The MADs go as UD SENDs to the peer's QP1 with the GSI
// Q_Key; the connection state is package cm's machine, on the wall
// clock. Once established, Live names the peer's QPN and first PSN.
//
// ListenCM makes the other end of it: the played end listens, as an
// rdma_cm server does, and answers the live peer's REQ.
type CM struct {
	m     *cm.Machine
	start time.Time
	live  Live
	req   mad.REQFields
	id    cm.ID
	begun bool
	psn   bth.PSN // of the MADs sent (QP1's own PSN space)
	ipid  uint16

	// The listening end: the port, the first PSN of the peer's
	// requests it puts in the REP, how long it waits for a REQ.
	passive  bool
	port     uint16
	repPSN   bth.PSN
	wait     time.Duration
	accepted bool

	state  cmState
	err    error
	sends  []cm.Send
	events []cm.Event
	out    [][]byte
	bufs   [][]byte
	pkt    bth.Packet
}

type cmState uint8

const (
	cmConnecting cmState = iota
	cmEstablished
	cmClosing
	cmClosed
)

// NewCM prepares a connection from live.Local (its QPN) to the listener
// on port of live.Peer, of path MTU mtu, with rdma_cm's request fields.
// The REQ's starting PSN is the first PSN of the peer's requests
// (live.PeerPSN, or psn when that is negative): the passive side sends
// from the REQ's, the active side from the REP's, as the Linux CM and
// the captures of rdma_rxe have it (cm.QPAttrsFor).
func NewCM(live Live, port uint16, psn bth.PSN, mtu stack.MTU) (*CM, error) {
	if live.PeerPSN >= 0 {
		psn = bth.PSN(live.PeerPSN) & bth.PSNMask
	}
	src := netip.AddrPortFrom(live.Local.IP, uint16(32768+int(psn)%28000))
	req, err := rdmacm.RequestFields(src, netip.AddrPortFrom(live.Peer.IP, port), mad.MTU(mtu), nil)
	if err != nil {
		return nil, err
	}
	req.LocalQPN, req.StartingPSN = live.Local.QPN, psn
	live.PeerPSN = int64(psn)
	return &CM{m: cm.New(cm.Config{}), live: live, req: req, psn: 1}, nil
}

// ListenCM prepares the played end (live.Local, its QPN) to accept an
// RDMA CM connection from live.Peer to port, as an rdma_cm server
// (rdma_listen, rdma_accept) does: the peer's REQ names its QP and the
// first PSN of this end's requests, and the REP answers with this end's
// QPN and psn, the first PSN of the peer's requests. A REQ from another
// address is left alone, a second one from the peer is refused
// (consumer reject), and none within wait is an error.
func ListenCM(live Live, port uint16, psn bth.PSN, wait time.Duration) *CM {
	live.PeerPSN = int64(psn & bth.PSNMask)
	return &CM{m: cm.New(cm.Config{}), live: live, psn: 1, passive: true, port: port, repPSN: psn & bth.PSNMask, wait: wait}
}

// Live returns the live setup: after the connection, with the peer's
// QPN and the first PSNs of both ends' requests (from the REP or the
// REQ).
func (c *CM) Live() Live { return c.live }

// Err returns why the connection failed (a REJ, a timeout), or nil.
func (c *CM) Err() error { return c.err }

// Disconnect makes the next Drive release the connection (DREQ, DREP).
func (c *CM) Disconnect() {
	if c.state == cmEstablished {
		c.state = cmClosing
		if err := c.m.Disconnect(c.now(time.Now()), c.id, nil); err != nil {
			c.state = cmClosed
		}
	}
}

func (c *CM) now(t time.Time) cm.Time {
	if c.start.IsZero() {
		c.start = t
	}
	return t.Sub(c.start)
}

// Done implements Player: the connection is up (or, after Disconnect,
// released), or failed.
func (c *CM) Done() bool {
	return c.err != nil || c.state == cmEstablished || c.state == cmClosed
}

// Closed reports whether the connection has been released (the peer's
// DREQ answered, or this end's acknowledged).
func (c *CM) Closed() bool { return c.state == cmClosed }

// Closing is a Player that runs c until the peer releases the
// connection (its DREQ, answered): the listening end of a replay waits
// for the client to disconnect first, as the recorded server did.
func (c *CM) Closing() Player { return closing{c} }

type closing struct{ *CM }

func (c closing) Done() bool { return c.err != nil || c.state == cmClosed }

// Poll implements Player.
func (c *CM) Poll(t time.Time) ([][]byte, time.Time) {
	now := c.now(t)
	if c.passive && !c.begun {
		c.begun = true
		if err := c.m.Listen(rdmacm.ServiceID(c.port)); err != nil {
			c.err = err
			return nil, time.Time{}
		}
	}
	if c.passive && !c.accepted && c.err == nil && now >= c.wait {
		c.err = fmt.Errorf("no RDMA CM connection request from %v to port %d within %v: start the peer's client (such as rping -c -a ADDRESS -p %d)",
			c.live.Peer.IP, c.port, c.wait, c.port)
		return nil, time.Time{}
	}
	if !c.begun {
		c.begun = true
		id, err := c.m.Connect(now, c.live.Peer.IP, c.req)
		if err != nil {
			c.err = err
			return nil, time.Time{}
		}
		c.id = id
	}
	if d, ok := c.m.Deadline(); ok && d <= now {
		c.m.Tick(now)
	}
	c.handle(now)
	c.out = c.out[:0]
	c.sends = c.m.Sends(c.sends[:0])
	for i := range c.sends {
		c.out = append(c.out, c.frame(&c.sends[i].MAD, len(c.out)))
	}
	var wake time.Time
	if d, ok := c.m.Deadline(); ok {
		wake = c.start.Add(d)
	}
	if c.passive && !c.accepted && (wake.IsZero() || c.start.Add(c.wait).Before(wake)) {
		wake = c.start.Add(c.wait)
	}
	return c.out, wake
}

// handle acts on the machine's events.
func (c *CM) handle(now cm.Time) {
	c.events = c.m.Events(c.events[:0])
	for _, e := range c.events {
		switch e.Type {
		case cm.EventRequest:
			if c.accepted || c.err != nil {
				c.m.Reject(now, e.ID, mad.RejConsumer, nil, nil)
				continue
			}
			req := *e.REQ
			c.id, c.accepted = e.ID, true
			c.live.Peer.QPN, c.live.LocalPSN = req.LocalQPN, int64(req.StartingPSN)
			// As many READs and atomics both ways as the REQ offers.
			rep := cm.Answer(&req, c.live.Local.QPN, c.repPSN, 16, 16, 7, 0)
			if err := c.m.Accept(now, c.id, rep); err != nil {
				c.err = err
			}
		case cm.EventReply:
			c.live.Peer.QPN, c.live.LocalPSN = e.REP.LocalQPN, int64(e.REP.StartingPSN)
			if err := c.m.ReadyToUse(now, c.id, nil); err != nil {
				c.err = err
			}
		case cm.EventEstablished:
			c.state = cmEstablished
		case cm.EventRejected:
			if c.passive {
				c.err = fmt.Errorf("the peer's RDMA CM gave up the connection (REJ %v)", e.Reason)
				continue
			}
			c.err = &RejectError{Reason: e.Reason}
		case cm.EventTimeout:
			if c.passive {
				c.err = errors.New("the peer's RDMA CM did not confirm the connection (no RTU to the REP)")
				continue
			}
			c.err = errors.New("the peer's RDMA CM did not answer (no listener on that port, or the peer is unreachable)")
		case cm.EventDisconnectRequest:
			c.m.Disconnect(now, c.id, nil) // the DREP
			c.state = cmClosed
		case cm.EventDisconnected:
			c.state = cmClosed
		}
	}
}

// frame builds the UD SEND carrying m to the peer's QP1, in buffer i.
func (c *CM) frame(m *[mad.Len]byte, i int) []byte {
	c.ipid++
	h := &bth.Headers{L2L3: bth.L2L3{SrcMAC: c.live.Local.MAC, DstMAC: c.live.Peer.MAC, SrcIP: c.live.Local.IP,
		DstIP: c.live.Peer.IP, IPID: c.ipid, SrcPort: bth.UDSourcePort(stack.GSIQPN)},
		BTH:  bth.BTHFields{Opcode: bth.OpUDSendOnly, PKey: 0xffff, DestQP: stack.GSIQPN, AckReq: true, PSN: c.psn},
		QKey: stack.GSIQKey, SrcQP: stack.GSIQPN}
	c.psn = c.psn.Next()
	for len(c.bufs) <= i {
		c.bufs = append(c.bufs, make([]byte, h.FrameLen(mad.Len)))
	}
	n, err := bth.Encode(c.bufs[i], h, m[:])
	if err != nil {
		return nil
	}
	return c.bufs[i][:n]
}

// Input implements Player: it takes the peer's MADs (UD SENDs to QP1
// with the GSI Q_Key) and leaves every other frame.
//
// The listening end also takes the first packet of the peer's for its QP
// after the REP as the connection established (the communication
// established event, §12.9.5.2): an active side may send before its RTU
// arrives. It leaves that packet to the next player all the same.
func (c *CM) Input(frame []byte, t time.Time) bool {
	p := &c.pkt
	if bth.Parse(frame, p) != nil || !p.ICRCOK() || p.SrcIP().Unmap() != c.live.Peer.IP.Unmap() {
		return false
	}
	if c.passive && c.accepted && c.state == cmConnecting && p.BTH().DestQP() == c.live.Local.QPN {
		now := c.now(t)
		c.m.Established(now, c.id)
		c.handle(now)
		return false
	}
	if p.Opcode() != bth.OpUDSendOnly || p.BTH().DestQP() != stack.GSIQPN {
		return false
	}
	if d := p.DETH(); d == nil || d.QKey() != stack.GSIQKey {
		return false
	}
	now := c.now(t)
	c.m.Receive(now, c.live.Peer.IP, p.Payload())
	c.handle(now)
	return true
}

// RejectError is a REJ of the connection request. Reason
// mad.RejInvalidServiceID means nobody listens on the port (yet).
type RejectError struct{ Reason mad.RejectReason }

func (e *RejectError) Error() string {
	if e.Reason == mad.RejInvalidServiceID {
		return "the peer's RDMA CM rejected the connection: nobody listens on that port (invalid_service_id)"
	}
	return fmt.Sprintf("the peer's RDMA CM rejected the connection: %v", e.Reason)
}
