// Package replay re-drives a conversation recorded in a capture at a live
// RoCE peer and compares the peer's answers with the recorded ones: the
// library behind `uroce replay`.
//
// Load groups a capture's RoCE packets into conversations (one QP pair
// between two addresses, RC, UC or UD). A Session plays one side of a
// conversation: it rewrites every field that differs between the
// recording and the live setup (MACs, IPs, UDP source port, QPNs, PSNs,
// R_Key and VA, and the buffers rping and perftest -R name in their
// SENDs: see AdvertFormat), re-encodes each frame with its ICRC, paces the packets
// (stepwise, as fast as possible, or as recorded), injects the faults it
// is asked for, and matches each live answer to the recorded one it
// stands for. It is sans-I/O: the caller moves frames between it and a
// link and gives it the time (Run does that over a stack.Link). A Group
// plays several conversations of one capture over one link, in their
// recorded order (Session.Limit, Stages).
package replay

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool"
	"github.com/uroce/uroce/mad"
)

// Endpoint is one end of a conversation: its addresses and its QP (the
// destination QPN of the packets sent to it).
type Endpoint struct {
	MAC [6]byte
	IP  netip.Addr
	QPN uint32
}

func (e Endpoint) String() string { return fmt.Sprintf("%v qp %#x", e.IP, e.QPN) }

// Packet is one recorded packet of a conversation.
type Packet struct {
	Frame   int           // its number in the capture file, from 1
	Time    time.Duration // since the conversation's first packet
	From    int           // the end that sent it: 0 or 1 (Conversation.Ends)
	H       bth.Headers
	Payload []byte
}

// Request reports whether the packet is a request (not an ACK, a READ
// response or an atomic ACK).
func (p *Packet) Request() bool { return p.H.Info().Request }

// Conversation is the packets between two QPs, in capture order.
type Conversation struct {
	Transport bth.Transport
	Ends      [2]Endpoint
	Packets   []Packet
	// Client is the end that opened a TCP connection to the other (the
	// pingpong and perftest exchanges' client), or -1 when the capture
	// shows none.
	Client int
	// CMClient is the end that sent the RDMA CM REQ naming its QP (the
	// rdma_cm client), or -1 when the capture shows none.
	CMClient int
	CMFrame  int // the frame of that REQ
	// Adverts is the format in which the ends' SENDs name their buffers
	// to each other (rping's, perftest's with -R), or AdvertNone.
	Adverts AdvertFormat
}

// cmREQ is a CM REQ seen on QP1: who sent it, for which of its QPs.
type cmREQ struct {
	from  netip.Addr
	qpn   uint32
	frame int
}

func (c *Conversation) String() string {
	n := [2]int{}
	for i := range c.Packets {
		n[c.Packets[i].From]++
	}
	s := fmt.Sprintf("%v: %v <-> %v, %d packets (%d and %d)", c.Transport, c.Ends[0], c.Ends[1], len(c.Packets), n[0], n[1])
	if c.Adverts != AdvertNone {
		s += fmt.Sprintf(", buffers named in %v SENDs", c.Adverts)
	}
	return s
}

// Initiator returns the end that sent the conversation's first request.
func (c *Conversation) Initiator() int {
	for i := range c.Packets {
		if c.Packets[i].Request() {
			return c.Packets[i].From
		}
	}
	return 0
}

// LoadStats counts what Load skipped.
type LoadStats struct {
	Frames, RoCE, BadICRC, NotRoCE, Malformed int
	QP1, V1, CNP                              int // left out: connection management, RoCE v1, CNPs
}

// Errors of Load.
var (
	ErrNoConversation = errors.New("no RoCE conversation in the capture")
)

type flowKey struct {
	src, dst netip.Addr
	qpn      uint32
}

type flow struct {
	key     flowKey
	srcMAC  [6]byte
	dstMAC  [6]byte
	tr      bth.Transport
	srcQP   uint32 // UD: the DETH's source QP
	packets []int  // indexes into all
	psns    map[bth.PSN]bool
	first   int
}

// Load reads a capture and returns its conversations, in the order of
// their first packets. Packets with a bad ICRC, malformed ones and those
// of QP1 (connection management) are left out and counted.
func Load(r io.Reader) ([]*Conversation, LoadStats, error) {
	var st LoadStats
	rd, err := pcaptool.NewReader(r)
	if err != nil {
		return nil, st, err
	}
	type rec struct {
		frame int
		t     time.Time
		h     bth.Headers
		pay   []byte
	}
	var all []rec
	var syns [][2]netip.Addr // TCP connections opened: client, server
	var reqs []cmREQ         // CM REQs: who sent one, for which QP
	flows := map[flowKey]*flow{}
	var order []*flow
	var p bth.Packet
	for {
		f, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, st, fmt.Errorf("frame %d: %w", st.Frames+1, err)
		}
		st.Frames++
		if perr := bth.Parse(f.Data, &p); perr != nil {
			if errors.Is(perr, bth.ErrNotRoCE) {
				st.NotRoCE++
				if src, dst, ok := tcpSYN(f.Data); ok {
					syns = append(syns, [2]netip.Addr{src, dst})
				}
			} else {
				st.Malformed++
			}
			continue
		}
		st.RoCE++
		if !p.ICRCOK() {
			st.BadICRC++
			continue
		}
		if p.Version != 2 {
			st.V1++
			continue
		}
		b := p.BTH()
		if b.DestQP() == 1 {
			st.QP1++
			if m, err := mad.Parse(p.Payload()); err == nil && m.IsCM() && m.AttrID() == mad.AttrREQ {
				reqs = append(reqs, cmREQ{from: p.SrcIP(), qpn: mad.REQ(m.Data()).LocalQPN(), frame: st.Frames})
			}
			continue
		}
		if b.Opcode().Transport() == bth.TransportCNP {
			st.CNP++
			continue
		}
		var h bth.Headers
		p.Headers(&h)
		rc := rec{frame: st.Frames, t: f.Time, h: h, pay: append([]byte(nil), p.Payload()...)}
		k := flowKey{p.SrcIP(), p.DstIP(), b.DestQP()}
		fl := flows[k]
		if fl == nil {
			fl = &flow{key: k, srcMAC: p.SrcMAC(), dstMAC: p.DstMAC(), tr: b.Opcode().Transport(), psns: map[bth.PSN]bool{}, first: len(all)}
			if p.Info.Has(bth.HdrDETH) {
				fl.srcQP = p.DETH().SrcQP()
			}
			flows[k] = fl
			order = append(order, fl)
		}
		fl.packets = append(fl.packets, len(all))
		if p.Info.Request {
			fl.psns[b.PSN()] = true
		}
		all = append(all, rc)
	}
	// Pair each flow with the flow the other way that answers it: for
	// UD the one whose source QP is its destination; for RC and UC the
	// one whose responses name its PSNs (or, with no responses, the
	// only one the other way).
	paired := map[*flow]bool{}
	var convs []*Conversation
	for _, f := range order {
		if paired[f] {
			continue
		}
		var best *flow
		bestScore := -1
		for _, g := range order {
			if g == f || paired[g] || g.key.src != f.key.dst || g.key.dst != f.key.src || g.tr != f.tr {
				continue
			}
			score := 0
			if f.tr == bth.TransportUD {
				if f.srcQP == g.key.qpn && g.srcQP == f.key.qpn {
					score = 1 << 20
				} else {
					continue
				}
			} else {
				for _, i := range g.packets {
					h := &all[i].h
					if !h.Info().Request && f.psns[h.BTH.PSN] {
						score++
					}
				}
				for _, i := range f.packets {
					h := &all[i].h
					if !h.Info().Request && g.psns[h.BTH.PSN] {
						score++
					}
				}
			}
			if score > bestScore {
				best, bestScore = g, score
			}
		}
		c := &Conversation{Transport: f.tr, Client: -1, CMClient: -1}
		c.Ends[0] = Endpoint{MAC: f.srcMAC, IP: f.key.src}
		c.Ends[1] = Endpoint{MAC: f.dstMAC, IP: f.key.dst, QPN: f.key.qpn}
		idx := append([]int(nil), f.packets...)
		from := map[int]int{}
		for _, i := range f.packets {
			from[i] = 0
		}
		paired[f] = true
		if best != nil {
			paired[best] = true
			c.Ends[0].QPN = best.key.qpn
			for _, i := range best.packets {
				from[i] = 1
			}
			idx = append(idx, best.packets...)
		} else if f.tr == bth.TransportUD {
			c.Ends[0].QPN = f.srcQP
		}
		sort.Ints(idx)
		t0 := all[idx[0]].t
		for _, i := range idx {
			r := &all[i]
			c.Packets = append(c.Packets, Packet{Frame: r.frame, Time: r.t.Sub(t0), From: from[i], H: r.h, Payload: r.pay})
		}
		for _, sy := range syns {
			for k := 0; k < 2; k++ {
				if sy[0] == c.Ends[k].IP && sy[1] == c.Ends[1-k].IP && c.Client < 0 {
					c.Client = k
				}
			}
		}
		for _, r := range reqs {
			for k := 0; k < 2; k++ {
				if r.from == c.Ends[k].IP && r.qpn == c.Ends[k].QPN && c.CMClient < 0 {
					c.CMClient, c.CMFrame = k, r.frame
				}
			}
		}
		c.Adverts = detectAdverts(c)
		convs = append(convs, c)
	}
	if len(convs) == 0 {
		return nil, st, ErrNoConversation
	}
	sort.SliceStable(convs, func(i, j int) bool { return convs[i].Packets[0].Frame < convs[j].Packets[0].Frame })
	return convs, st, nil
}

// tcpSYN returns the addresses of a TCP SYN (a connection being opened).
func tcpSYN(b []byte) (src, dst netip.Addr, ok bool) {
	if len(b) < 14 {
		return
	}
	et, l3 := uint16(b[12])<<8|uint16(b[13]), 14
	if et == bth.EtherTypeVLAN && len(b) >= 18 {
		et, l3 = uint16(b[16])<<8|uint16(b[17]), 18
	}
	var l4 int
	switch et {
	case bth.EtherTypeIPv4:
		if len(b) < l3+20 || b[l3+9] != 6 {
			return
		}
		l4 = l3 + int(b[l3]&0xf)*4
		src, dst = netip.AddrFrom4([4]byte(b[l3+12:l3+16])), netip.AddrFrom4([4]byte(b[l3+16:l3+20]))
	case bth.EtherTypeIPv6:
		if len(b) < l3+40 || b[l3+6] != 6 {
			return
		}
		l4 = l3 + 40
		src, dst = netip.AddrFrom16([16]byte(b[l3+8:l3+24])), netip.AddrFrom16([16]byte(b[l3+24:l3+40]))
	default:
		return
	}
	if len(b) < l4+14 {
		return
	}
	flags := b[l4+13]
	return src, dst, flags&0x02 != 0 && flags&0x10 == 0
}

// Select returns the conversation with a QP numbered qpn (either end), or
// the only one when qpn is negative.
func Select(convs []*Conversation, qpn int64) (*Conversation, error) {
	if qpn < 0 {
		if len(convs) == 1 {
			return convs[0], nil
		}
		return nil, fmt.Errorf("the capture holds %d conversations: choose one with its QPN (list them with --list)", len(convs))
	}
	for _, c := range convs {
		if int64(c.Ends[0].QPN) == qpn || int64(c.Ends[1].QPN) == qpn {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no conversation with qp %#x in the capture (list them with --list)", qpn)
}

// Refused returns the frame numbers of end me's RDMA and atomic
// requests that the other end answered with a remote access or invalid
// request NAK: a replay keeps their keys and addresses as recorded (a
// recorded bad R_Key stays bad), and the self peer's region leaves them
// out.
func (c *Conversation) Refused(me int) map[int]bool {
	naked := map[bth.PSN]bool{}
	for i := range c.Packets {
		p := &c.Packets[i]
		if p.From != me && p.H.Info().Kind == bth.KindAck && p.H.Syndrome.Kind() == bth.AckKindNAK {
			if v := p.H.Syndrome.Value(); v == bth.NAKRemoteAccessError || v == bth.NAKInvalidRequest {
				naked[p.H.BTH.PSN] = true
			}
		}
	}
	out := map[int]bool{}
	for i := range c.Packets {
		p := &c.Packets[i]
		info := p.H.Info()
		if p.From == me && (info.Has(bth.HdrRETH) || info.Has(bth.HdrAtomicETH)) && naked[p.H.BTH.PSN] {
			out[p.Frame] = true
		}
	}
	return out
}

// Recorded is what a recording shows of one end's QP: its QPN, its first
// request PSN, the R_Key and VA of its region (from the other end's RDMA
// requests to it) and the path MTU its full-size packets show.
type Recorded struct {
	QPN    uint32
	PSN    bth.PSN
	HasPSN bool
	RKey   uint32
	VA     uint64
	PMTU   int // bytes; 0 when no packet shows it
}

// Recorded returns what the recording shows of end's QP.
func (c *Conversation) Recorded(end int) Recorded {
	r := Recorded{QPN: c.Ends[end].QPN}
	va := false
	for i := range c.Packets {
		p := &c.Packets[i]
		info := p.H.Info()
		if (info.Pos == bth.PosFirst || info.Pos == bth.PosMiddle) && len(p.Payload) > r.PMTU {
			r.PMTU = len(p.Payload)
		}
		if p.From == end && info.Request && !r.HasPSN {
			r.PSN, r.HasPSN = p.H.BTH.PSN, true
		}
		if p.From != end && info.Request && !va {
			switch {
			case info.Has(bth.HdrRETH):
				r.RKey, r.VA, va = p.H.RKey, p.H.VA, true
			case info.Has(bth.HdrAtomicETH):
				r.RKey, r.VA, va = p.H.AtomicRKey, p.H.AtomicVA, true
			}
		}
	}
	return r
}
