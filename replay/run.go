package replay

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
)

// Player is what Drive moves frames for: a Session, or a conformance
// scenario's run.
type Player interface {
	Poll(now time.Time) ([][]byte, time.Time)
	Input(frame []byte, now time.Time) bool
	Done() bool
}

// Run plays s over link, in real time, until it is done or ctx ends. tap,
// when not nil, sees every frame sent (out true) and every frame of the
// peer's received, as it passes (to write a capture of the replay).
func Run(ctx context.Context, s *Session, link stack.Link, tap func(frame []byte, out bool)) (*Report, error) {
	err := Drive(ctx, s, link, tap)
	return s.Report(), err
}

// Drive runs p over link in real time until it is done or ctx ends.
func Drive(ctx context.Context, p Player, link stack.Link, tap func(frame []byte, out bool)) error {
	rx := make([][]byte, 64)
	for {
		out, wake := p.Poll(time.Now())
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
					return err
				}
				link.Poll(time.Millisecond)
			}
		}
		if p.Done() {
			return nil
		}
		n := link.Receive(rx)
		for _, f := range rx[:n] {
			if p.Input(f, time.Now()) && tap != nil {
				tap(f, false)
			}
		}
		link.Release()
		if n > 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
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

// Responder is a uroce device in this process with one QP set up to
// answer a peer that plays the other end at the frame level (a replay, a
// conformance scenario): connected to it, with a region every remote
// access is granted to and receives posted. Its link is the other end of
// Link.
type Responder struct {
	Link stack.Link // the other end's side of the in-memory link
	Live Live       // the live setup, for NewSession
	Dev  *stack.Device
	PD   *stack.PD
	QP   *stack.QP
	MR   *stack.MR
	CQ   *stack.CQ

	// A self peer's SENDs (PeerSend): the adverts' format, the recorded
	// VA at the region's start, and the buffers they go from.
	adverts AdvertFormat
	base    uint64
	baseSet bool // the played end's requests name the region (else adverts name its start)
	sendMR  *stack.MR
	sends   int
}

// ResponderConfig describes a Responder.
type ResponderConfig struct {
	Transport bth.Transport // RC, UC or UD
	// Local is the end that plays (its MAC, IP and QPN), Peer the
	// responder's addresses.
	Local, Peer Endpoint
	// RQPSN is the first PSN the responder expects, SQPSN its own
	// first.
	RQPSN, SQPSN bth.PSN
	PathMTU      stack.MTU // 0: 1024
	Region       int       // bytes of the region (default 64 KiB)
	Receives     int       // receives posted, each over the whole region (0: 16, negative: none)
	// SRQ posts the receives on a shared receive queue: the QP's ACKs
	// then advertise no end-to-end credits (code 31), as rdma_rxe's do;
	// otherwise they count the receives left.
	SRQ  bool
	QKey uint32 // UD
	// Access is what the QP grants remote requests (default: write,
	// read and atomics).
	Access stack.Access
	// Retries, when set, are the QP's retry counts as a requester
	// (default: 7 and 7).
	Retries *Retries
	// KeepPastGap keeps the requests past a PSN gap
	// (stack.Config.KeepPastGap).
	KeepPastGap bool
}

// Retries are a requester QP's transport and RNR retry counts.
type Retries struct{ Cnt, RNR uint8 }

// NewResponder starts a responder.
func NewResponder(cfg ResponderConfig) (*Responder, error) {
	if cfg.Local.IP.Is4() != cfg.Peer.IP.Is4() {
		return nil, fmt.Errorf("the two ends' addresses are of different families (%v, %v)", cfg.Local.IP, cfg.Peer.IP)
	}
	typ, ok := map[bth.Transport]stack.QPType{bth.TransportRC: stack.RC, bth.TransportUC: stack.UC, bth.TransportUD: stack.UD}[cfg.Transport]
	if !ok {
		return nil, fmt.Errorf("transport %v: the uroce responder runs RC, UC and UD", cfg.Transport)
	}
	if cfg.PathMTU == 0 {
		cfg.PathMTU = stack.MTU1024
	}
	if cfg.Region <= 0 {
		cfg.Region = 64 << 10
	}
	if cfg.Receives == 0 {
		cfg.Receives = 16
	}
	if cfg.Access == 0 {
		cfg.Access = stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic
	}
	pa, pb := pipe.New(pipe.Config{MTU: 9000, Slots: 1024})
	dev, err := stack.Open(context.Background(), stack.Config{Link: pb, MAC: cfg.Peer.MAC, Addrs: []netip.Addr{cfg.Peer.IP},
		Neighbors: stack.StaticNeighbors{cfg.Local.IP: cfg.Local.MAC}, Name: "uroce_self", KeepPastGap: cfg.KeepPastGap})
	if err != nil {
		return nil, err
	}
	r := &Responder{Link: pa, Dev: dev}
	if err := r.setup(typ, &cfg); err != nil {
		dev.Close()
		return nil, err
	}
	return r, nil
}

// Close stops the responder.
func (r *Responder) Close() error { return r.Dev.Close() }

func (r *Responder) setup(typ stack.QPType, cfg *ResponderConfig) error {
	pd, err := r.Dev.AllocPD()
	if err != nil {
		return err
	}
	r.PD = pd
	if r.MR, err = pd.RegisterMR(make([]byte, cfg.Region), stack.AccessLocalWrite|cfg.Access); err != nil {
		return err
	}
	if r.CQ, err = r.Dev.CreateCQ(4096); err != nil {
		return err
	}
	init := stack.QPInit{Type: typ, SendCQ: r.CQ, RecvCQ: r.CQ, MaxSendWR: 64, MaxRecvWR: max(cfg.Receives, 1), MaxRecvSGE: 1}
	var srq *stack.SRQ
	if cfg.SRQ {
		if srq, err = pd.CreateSRQ(stack.SRQInit{MaxWR: max(cfg.Receives, 1), MaxSGE: 1}); err != nil {
			return err
		}
		init.SRQ = srq
	}
	q, err := pd.CreateQP(init)
	if err != nil {
		return err
	}
	r.QP = q
	sgid := -1
	for i := 0; ; i++ {
		g, err := r.Dev.GID(i)
		if err != nil {
			break
		}
		if g.Unmap() == cfg.Peer.IP.Unmap() {
			sgid = i
			break
		}
	}
	if sgid < 0 {
		return fmt.Errorf("the uroce responder has no GID for %v", cfg.Peer.IP)
	}
	if err := q.ToInit(stack.InitAttr{AccessFlags: cfg.Access, QKey: cfg.QKey}); err != nil {
		return err
	}
	for i := 0; i < cfg.Receives; i++ {
		wr := &stack.RecvWR{ID: uint64(i), SG: []stack.SGE{r.MR.SGE(0, uint32(cfg.Region))}}
		if srq != nil {
			err = srq.PostRecv(wr)
		} else {
			err = q.PostRecv(wr)
		}
		if err != nil {
			return err
		}
	}
	if err := q.ToRTR(stack.RTRAttr{DestQPN: cfg.Local.QPN, AH: stack.AHAttr{DGID: cfg.Local.IP, SGIDIndex: sgid}, RQPSN: cfg.RQPSN,
		PathMTU: cfg.PathMTU, MaxDestRdAtomic: 16, MinRNRTimer: 12}); err != nil {
		return err
	}
	rt := Retries{Cnt: 7, RNR: 7}
	if cfg.Retries != nil {
		rt = *cfg.Retries
	}
	if err := q.ToRTS(stack.RTSAttr{SQPSN: cfg.SQPSN, Timeout: 14, RetryCnt: rt.Cnt, RNRRetry: rt.RNR, MaxRdAtomic: 16}); err != nil {
		return err
	}
	r.Live = Live{Local: cfg.Local, Peer: Endpoint{MAC: cfg.Peer.MAC, IP: cfg.Peer.IP, QPN: q.QPN()},
		LocalPSN: int64(cfg.RQPSN), PeerPSN: int64(cfg.SQPSN), RKey: int64(r.MR.RKey()), VA: r.MR.Addr(), VASet: true}
	return nil
}

// NewSelfPeer starts a Responder set up as the recorded peer of end me
// of c was: the recorded PSNs and path MTU, a region covering the
// recorded requests and holding what the recording shows it held,
// receives for the recorded SENDs, and on a shared receive queue when
// the recorded peer's ACKs advertised no credits (as rdma_rxe's).
func NewSelfPeer(c *Conversation, me int) (*Responder, error) {
	peer := 1 - me
	noCredits := true
	for i := range c.Packets {
		p := &c.Packets[i]
		if p.From == peer && p.H.Info().Has(bth.HdrAETH) && p.H.Syndrome.Kind() == bth.AckKindACK && p.H.Syndrome.Value() != 31 {
			noCredits = false
		}
	}
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
		return nil, fmt.Errorf("the recorded RDMA requests span %d bytes: more than the self peer registers", size)
	}
	mtu := stack.MTU256
	for mtu < stack.MTU4096 && mtu.Bytes() < maxPay {
		mtu++
	}
	r, err := NewResponder(ResponderConfig{Transport: c.Transport, Local: c.Ends[me], Peer: c.Ends[peer], RQPSN: ourPSN, SQPSN: peerPSN,
		PathMTU: mtu, Region: size + 8, Receives: sends + 16, QKey: qkey, SRQ: noCredits && c.Transport == bth.TransportRC})
	if err != nil {
		return nil, err
	}
	prefill(c, me, r.MR.Bytes(), vaBase)
	r.adverts, r.base, r.baseSet = c.Adverts, vaBase, vaSet
	return r, nil
}

// sendSlot is the room for one of a self peer's SENDs.
const sendSlot = 4096

// PeerSend makes the self peer send one of the recorded peer's SENDs (a
// Session's Options.PeerSend), its advert, if it carries one, naming
// the self peer's own region: the recorded buffer at its place in it.
func (r *Responder) PeerSend(p *Packet) error {
	if len(p.Payload) > sendSlot {
		return fmt.Errorf("a SEND of %d bytes: the self peer sends up to %d", len(p.Payload), sendSlot)
	}
	if r.sendMR == nil {
		pd := r.PD
		mr, err := pd.RegisterMR(make([]byte, 64*sendSlot), stack.AccessLocalWrite)
		if err != nil {
			return err
		}
		r.sendMR = mr
	}
	off := (r.sends % 64) * sendSlot // the send queue holds 64: a slot is free again when its turn comes
	r.sends++
	buf := r.sendMR.Bytes()[off : off+len(p.Payload)]
	copy(buf, p.Payload)
	if a, ok := ParseAdvert(r.adverts, p.Payload); ok {
		va := r.MR.Addr()
		if r.baseSet && a.VA >= r.base && a.VA-r.base < uint64(len(r.MR.Bytes())) {
			va += a.VA - r.base
		}
		a.RKey, a.VA = r.MR.RKey(), va
		if a.GID != ([16]byte{}) {
			a.GID = gidOf(r.Live.Peer.IP)
		}
		a.put(r.adverts, buf)
	}
	return r.QP.PostSend(&stack.SendWR{ID: uint64(r.sends), Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{r.sendMR.SGE(uint64(off), uint32(len(p.Payload)))}})
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

// Then is a Player that plays first until it is done, then the Player
// that next makes from what first learnt (a Session, from a CM's live
// setup). Frames that come after first is done, even in the same
// receive batch, go to the second, and those it leaves go to first
// still (a DREQ of the peer's during the replay gets its DREP). When
// first ends with an error (its Err), next is not called. Err returns
// either one's error.
func Then(first Player, next func() (Player, error)) *Chain {
	return &Chain{first: first, next: next}
}

// Chain is the Player of Then.
type Chain struct {
	first, second Player
	next          func() (Player, error)
	err           error
	out           [][]byte
}

// Err returns why the chain stopped early: the first player's error or
// next's.
func (c *Chain) Err() error { return c.err }

func (c *Chain) advance() {
	if c.second != nil || c.err != nil || !c.first.Done() {
		return
	}
	if e, ok := c.first.(interface{ Err() error }); ok && e.Err() != nil {
		c.err = e.Err()
		return
	}
	c.second, c.err = c.next()
}

// Poll implements Player.
func (c *Chain) Poll(now time.Time) ([][]byte, time.Time) {
	out, wake := c.first.Poll(now)
	c.advance()
	if c.second == nil {
		return out, wake
	}
	c.out = append(c.out[:0], out...)
	o2, w2 := c.second.Poll(now)
	c.out = append(c.out, o2...)
	if wake.IsZero() || !w2.IsZero() && w2.Before(wake) {
		wake = w2
	}
	return c.out, wake
}

// Input implements Player.
func (c *Chain) Input(frame []byte, now time.Time) bool {
	if c.second != nil && c.second.Input(frame, now) {
		return true
	}
	ok := c.first.Input(frame, now)
	had := c.second != nil
	c.advance()
	if !ok && !had && c.second != nil {
		return c.second.Input(frame, now) // the frame that ended first's part
	}
	return ok
}

// Done implements Player.
func (c *Chain) Done() bool {
	c.advance()
	return c.err != nil || c.second != nil && c.second.Done()
}
