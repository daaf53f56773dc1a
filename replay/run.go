package replay

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/stack"
)

// Run plays s over link, in real time, until it is done or ctx ends. tap,
// when not nil, sees every frame sent (out true) and every frame of the
// peer's received, as it passes (to write a capture of the replay).
func Run(ctx context.Context, s *Session, link stack.Link, tap func(frame []byte, out bool)) (*Report, error) {
	rx := make([][]byte, 64)
	for {
		out, wake := s.Poll(time.Now())
		for len(out) > 0 {
			n := link.Transmit(out)
			if tap != nil {
				for _, f := range out[:n] {
					tap(f, true)
				}
			}
			out = out[n:]
			if n == 0 {
				if err := ctx.Err(); err != nil {
					return s.Report(), err
				}
				link.Poll(time.Millisecond)
			}
		}
		if s.Done() {
			return s.Report(), nil
		}
		n := link.Receive(rx)
		for _, f := range rx[:n] {
			if s.Input(f, time.Now()) && tap != nil {
				tap(f, false)
			}
		}
		link.Release()
		if n > 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return s.Report(), err
		}
		d := 50 * time.Millisecond
		if !wake.IsZero() {
			d = min(d, time.Until(wake))
		}
		if d > 0 {
			link.Poll(d)
		}
	}
}

// SelfPeer is a uroce device in this process that answers a replay as
// the recorded peer would have been set up: a QP of the conversation's
// transport connected to the played end, with a region for its RDMA
// requests and receives for its SENDs. Its link is the other end of
// Link.
type SelfPeer struct {
	Link stack.Link // the played end's side of the pipe
	Live Live       // the live setup to give NewSession
	dev  *stack.Device
}

// NewSelfPeer starts a uroce peer for playing end me of c.
func NewSelfPeer(c *Conversation, me int) (*SelfPeer, error) {
	peer := 1 - me
	pa, pb := stack.NewPipe(stack.PipeConfig{MTU: 9000, Slots: 1024})
	loc, rem := c.Ends[me], c.Ends[peer]
	if loc.IP.Is4() != rem.IP.Is4() {
		return nil, fmt.Errorf("the two ends' addresses are of different families (%v, %v)", loc.IP, rem.IP)
	}
	dev, err := stack.Open(context.Background(), stack.Config{Link: pb, MAC: rem.MAC, Addrs: []netip.Addr{rem.IP},
		Neighbors: stack.StaticNeighbors{loc.IP: loc.MAC}, Name: "uroce_self"})
	if err != nil {
		return nil, err
	}
	sp := &SelfPeer{Link: pa, dev: dev}
	if err := sp.setup(c, me); err != nil {
		dev.Close()
		return nil, err
	}
	return sp, nil
}

// prefill writes into the peer's region what the recording shows it
// held: the data of its READ responses and the original values of its
// atomic answers, at the offsets of the requests they answer.
func prefill(c *Conversation, me int, mem []byte, vaBase uint64) {
	type read struct {
		psn  bth.PSN
		n    int // response packets
		off  uint64
		pmtu int
	}
	var reads []*read
	atomics := map[bth.PSN]uint64{} // request PSN -> offset
	seen := map[uint64]bool{}
	for i := range c.Packets {
		p := &c.Packets[i]
		info := p.H.Info()
		if p.From == me {
			switch {
			case info.Kind == bth.KindReadRequest:
				reads = append(reads, &read{psn: p.H.BTH.PSN, off: p.H.VA - vaBase, n: 1})
			case info.Has(bth.HdrAtomicETH):
				atomics[p.H.BTH.PSN] = p.H.AtomicVA - vaBase
			}
			continue
		}
		switch info.Kind {
		case bth.KindReadResponse:
			for _, r := range reads {
				k := p.H.BTH.PSN.Sub(r.psn)
				if k < 0 || k > 1<<16 {
					continue
				}
				if info.Pos == bth.PosFirst {
					r.pmtu = len(p.Payload)
				}
				if k > 0 && r.pmtu == 0 {
					continue
				}
				if at := r.off + uint64(k*r.pmtu); at+uint64(len(p.Payload)) <= uint64(len(mem)) {
					copy(mem[at:], p.Payload)
				}
			}
		case bth.KindAtomicAck:
			off, ok := atomics[p.H.BTH.PSN]
			if ok && !seen[off] && off+8 <= uint64(len(mem)) {
				seen[off] = true                                            // the first answer shows what the region held
				binary.NativeEndian.PutUint64(mem[off:], p.H.AtomicAckOrig) // the responder's byte order
			}
		}
	}
}

// Close stops the peer.
func (sp *SelfPeer) Close() error { return sp.dev.Close() }

func (sp *SelfPeer) setup(c *Conversation, me int) error {
	peer := 1 - me
	var vaBase, vaEnd uint64
	vaSet := false
	sends, maxPay := 0, 0
	var ourPSN, peerPSN bth.PSN
	ourSet, peerSet := false, false
	var qkey uint32
	refused := c.Refused(me)
	for i := range c.Packets {
		p := &c.Packets[i]
		maxPay = max(maxPay, len(p.Payload))
		info := p.H.Info()
		if p.From != me || !info.Request {
			if p.From == peer && info.Request && !peerSet {
				peerPSN, peerSet = p.H.BTH.PSN, true
			}
			continue
		}
		if !ourSet {
			ourPSN, ourSet = p.H.BTH.PSN, true
		}
		if info.Kind == bth.KindSend && (info.Pos == bth.PosFirst || info.Pos == bth.PosOnly) {
			sends++
		}
		if info.Has(bth.HdrDETH) {
			qkey = p.H.QKey
		}
		va, n := uint64(0), uint64(0)
		switch {
		case refused[p.Frame]:
			continue
		case info.Has(bth.HdrRETH):
			va, n = p.H.VA, uint64(p.H.DMALen)
		case info.Has(bth.HdrAtomicETH):
			va, n = p.H.AtomicVA, 8
		default:
			continue
		}
		if !vaSet {
			vaBase, vaEnd, vaSet = va, va, true
		}
		vaEnd = max(vaEnd, va+n)
	}
	size := max(int(vaEnd-vaBase), maxPay, 64<<10)
	if size > 256<<20 {
		return fmt.Errorf("the recorded RDMA requests span %d bytes: more than the self peer registers", size)
	}
	pd, err := sp.dev.AllocPD()
	if err != nil {
		return err
	}
	mr, err := pd.RegisterMR(make([]byte, size+8), stack.AccessLocalWrite|stack.AccessRemoteWrite|stack.AccessRemoteRead|stack.AccessRemoteAtomic)
	if err != nil {
		return err
	}
	cq, err := sp.dev.CreateCQ(4096)
	if err != nil {
		return err
	}
	typ := map[bth.Transport]stack.QPType{bth.TransportRC: stack.RC, bth.TransportUC: stack.UC, bth.TransportUD: stack.UD}[c.Transport]
	if typ == 0 && c.Transport != bth.TransportRC {
		return fmt.Errorf("transport %v: the self peer runs RC, UC and UD", c.Transport)
	}
	q, err := pd.CreateQP(stack.QPInit{Type: typ, SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, MaxRecvWR: sends + 16, MaxRecvSGE: 1})
	if err != nil {
		return err
	}
	sgid := -1
	for i := 0; ; i++ {
		g, err := sp.dev.GID(i)
		if err != nil {
			break
		}
		if g.Unmap() == c.Ends[peer].IP.Unmap() {
			sgid = i
			break
		}
	}
	if sgid < 0 {
		return fmt.Errorf("the self peer has no GID for %v", c.Ends[peer].IP)
	}
	mtu := stack.MTU256
	for mtu < stack.MTU4096 && mtu.Bytes() < maxPay {
		mtu++
	}
	if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic, QKey: qkey}); err != nil {
		return err
	}
	prefill(c, me, mr.Bytes(), vaBase)
	for i := 0; i < sends+16; i++ {
		if err := q.PostRecv(&stack.RecvWR{ID: uint64(i), SG: []stack.SGE{mr.SGE(0, uint32(size))}}); err != nil {
			return err
		}
	}
	if err := q.ToRTR(stack.RTRAttr{DestQPN: c.Ends[me].QPN, AH: stack.AHAttr{DGID: c.Ends[me].IP, SGIDIndex: sgid}, RQPSN: ourPSN,
		PathMTU: mtu, MaxDestRdAtomic: 16, MinRNRTimer: 12}); err != nil {
		return err
	}
	if err := q.ToRTS(stack.RTSAttr{SQPSN: peerPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}); err != nil {
		return err
	}
	sp.Live = Live{Local: c.Ends[me], Peer: Endpoint{MAC: c.Ends[peer].MAC, IP: c.Ends[peer].IP, QPN: q.QPN()},
		LocalPSN: int64(ourPSN), PeerPSN: int64(peerPSN), RKey: int64(mr.RKey()), VA: mr.Addr(), VASet: true}
	return nil
}
