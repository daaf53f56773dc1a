package pcaptool

import (
	"net/netip"
	"strconv"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/pfc"
)

// Severity grades a finding.
type Severity uint8

// Severities. Errors make `uroce pcap verify` fail; flow anomalies fail
// it only with --strict; notes never do.
const (
	SevNote Severity = iota
	SevFlow
	SevError
)

func (s Severity) String() string { return [...]string{"note", "flow", "error"}[s] }

// FlowID names the packets sent to one QP: source and destination
// address and destination QP (plus the source QP for UD, whose packets
// to one QP come from many).
type FlowID struct {
	Src, Dst netip.Addr
	DestQP   uint32
	SrcQP    uint32 // UD only
	UD       bool
}

// Finding is one problem or observation.
type Finding struct {
	Frame    int
	Severity Severity
	Check    string // icrc, length, pad, reserved, opcode, header, checksum, truncated, psn_gap, retransmission, duplicate, sequence, mtu, nak, rnr_nak, read_response, atomic, ack, msn, cnp, cm, cm_traffic
	Flow     *FlowID
	Message  string
}

// Counts are the totals of a verification.
type Counts struct {
	Packets   int // frames in the file
	RoCE      int // RoCE frames (complete, truncated or malformed)
	ICRCOK    int
	ICRCBad   int
	Malformed int // RoCE frames with a format error
	Truncated int // RoCE frames cut by the snap length
	Errors    int // findings of severity error
	Flow      int // flow anomalies
	Notes     int
	// MACControl counts the MAC Control frames (EtherType 0x8808: PAUSE,
	// PFC, other opcodes), which are not RoCE and not checked.
	MACControl int
}

// Add adds c2 to c.
func (c *Counts) Add(c2 Counts) {
	c.Packets += c2.Packets
	c.RoCE += c2.RoCE
	c.ICRCOK += c2.ICRCOK
	c.ICRCBad += c2.ICRCBad
	c.Malformed += c2.Malformed
	c.Truncated += c2.Truncated
	c.Errors += c2.Errors
	c.Flow += c2.Flow
	c.Notes += c2.Notes
	c.MACControl += c2.MACControl
}

// Summary is the line `N packets, N roce, N icrc_ok, N icrc_bad, N malformed`.
func (c *Counts) Summary() string {
	itoa := strconv.Itoa
	return itoa(c.Packets) + " packets, " + itoa(c.RoCE) + " roce, " + itoa(c.ICRCOK) + " icrc_ok, " +
		itoa(c.ICRCBad) + " icrc_bad, " + itoa(c.Malformed) + " malformed"
}

// Verifier checks the frames of one capture file, in order: Frame for
// each, then Finish once.
type Verifier struct {
	// Report receives each finding as it is made.
	Report func(*Finding)
	Counts Counts

	flows map[FlowID]*qpFlow
	order []*qpFlow // flows in order of appearance, for deterministic pairing
	rec   Record

	cm       []cmMsg // the CM messages, related by Finish
	cmFull   bool    // more than maxCMMessages were seen
	finished bool
}

// NewVerifier returns a verifier reporting to report.
func NewVerifier(report func(*Finding)) *Verifier {
	return &Verifier{Report: report, flows: map[FlowID]*qpFlow{}}
}

func (v *Verifier) report(frame int, sev Severity, check string, fl *qpFlow, msg string) {
	switch sev {
	case SevError:
		v.Counts.Errors++
	case SevFlow:
		v.Counts.Flow++
	default:
		v.Counts.Notes++
	}
	f := &Finding{Frame: frame, Severity: sev, Check: check, Message: msg}
	if fl != nil {
		id := fl.id
		f.Flow = &id
	}
	if v.Report != nil {
		v.Report(f)
	}
}

// Frame checks frame number n (1-based).
func (v *Verifier) Frame(n int, f *Frame) {
	v.Counts.Packets++
	rec := &v.rec
	if !Decode(n, f, rec) {
		if _, err := pfc.Parse(f.Data); err != pfc.ErrNotMACControl {
			v.Counts.MACControl++
		}
		return
	}
	v.Counts.RoCE++
	switch rec.Status {
	case StatusTruncated:
		v.Counts.Truncated++
		v.report(n, SevNote, "truncated", nil, "captured "+strconv.Itoa(rec.CapLen)+" of "+strconv.Itoa(rec.OrigLen)+" bytes: icrc not checked")
	case StatusMalformed:
		v.Counts.Malformed++
		check := "length"
		if rec.Problem == "reserved opcode" {
			check = "opcode"
			rec.Problem = "reserved opcode " + appendHexStr(uint64(rec.P.Opcode()), 2)
		}
		v.report(n, SevError, check, nil, rec.Problem)
	}
	if rec.ICRCChecked() {
		if rec.ICRCOK {
			v.Counts.ICRCOK++
		} else {
			v.Counts.ICRCBad++
			v.report(n, SevError, "icrc", nil, "stored "+appendHexStr(uint64(rec.P.ICRC()), 8)+", computed "+appendHexStr(uint64(rec.P.ComputeICRC()), 8))
		}
	}
	if rec.Status == StatusOK {
		if v.checkFormat(rec) {
			v.Counts.Malformed++
		}
	}
	// Packets a receiver would drop do not take part in the flow.
	if !rec.HasBTH() || rec.Status == StatusMalformed || (rec.ICRCChecked() && !rec.ICRCOK) {
		return
	}
	v.flow(rec)
	if rec.MAD != nil {
		v.cmMessage(rec)
	}
}

// checkFormat checks a complete packet's fields and reports whether it
// found a format error.
func (v *Verifier) checkFormat(rec *Record) bool {
	p := &rec.P
	n := rec.Frame
	bad := false
	fail := func(check, msg string) {
		bad = true
		v.report(n, SevError, check, nil, msg)
	}
	bt := p.BTH()
	info := p.Info
	itoa := strconv.Itoa
	if l := p.End - p.BTHOff; l%4 != 0 {
		fail("length", "transport packet of "+itoa(l)+" bytes is not a multiple of 4")
	}
	if !p.IPv4ChecksumOK() {
		fail("checksum", "bad ipv4 header checksum")
	}
	if !p.UDPChecksumOK() {
		fail("checksum", "bad udp checksum")
	}
	if bt.TVer() != 0 {
		fail("reserved", "bth transport version "+itoa(int(bt.TVer()))+" (must be 0)")
	}
	if bt.Resv6() != 0 {
		// Byte 4 is left out of the ICRC because the fabric may rewrite
		// it, so its reserved bits are not held against the sender
		// (Huawei sets 0x10 there).
		v.report(n, SevNote, "reserved", nil, "bth reserved bits after fecn/becn are "+appendHexStr(uint64(bt.Resv6()), 2))
	}
	if bt.Resv7() != 0 {
		fail("reserved", "bth reserved bits after the ack request bit are "+appendHexStr(uint64(bt.Resv7()), 2))
	}
	if !info.Payload && p.PayloadN > 0 {
		fail("header", info.Name+" carries "+itoa(p.PayloadN)+" payload bytes")
	}
	if !info.Payload && p.Pad != 0 {
		fail("pad", info.Name+" has pad count "+itoa(p.Pad)+" without a payload")
	}
	if p.PayloadN > 4096 {
		fail("length", "payload of "+itoa(p.PayloadN)+" bytes exceeds the largest path mtu (4096)")
	}
	if info.Pos == bth.PosFirst || info.Pos == bth.PosMiddle {
		if p.Pad != 0 {
			fail("pad", info.Name+" has pad count "+itoa(p.Pad)+": only the last packet of a message is padded")
		}
	}
	if e := p.AETH(); e != nil {
		s := e.Syndrome()
		switch {
		case s&0x80 != 0:
			fail("reserved", "aeth syndrome "+appendHexStr(uint64(s), 2)+" has reserved bit 7 set")
		case s.Kind() == bth.AckKindReserved:
			fail("reserved", "aeth syndrome "+appendHexStr(uint64(s), 2)+" is of the reserved kind")
		case s.Kind() == bth.AckKindNAK && s.Value() > bth.NAKInvalidRDRequest && !info.Has(bth.HdrDCETH):
			fail("reserved", "aeth syndrome "+appendHexStr(uint64(s), 2)+": reserved nak code "+itoa(int(s.Value())))
		}
	}
	if e := p.DETH(); e != nil && e[4] != 0 {
		fail("reserved", "deth reserved byte is "+appendHexStr(uint64(e[4]), 2))
	}
	if e := p.XRCETH(); e != nil && e[0] != 0 {
		fail("reserved", "xrceth reserved byte is "+appendHexStr(uint64(e[0]), 2))
	}
	if info.Kind == bth.KindCNP {
		pad := p.Frame[p.BTHOff+bth.BTHLen : p.BTHOff+bth.BTHLen+bth.CNPPadLen]
		for _, c := range pad {
			if c != 0 {
				fail("reserved", "cnp reserved bytes are not zero")
				break
			}
		}
	}
	return bad
}

func appendHexStr(v uint64, w int) string { return string(appendHex(nil, v, w)) }

// qpFlow is what the verifier knows of the packets sent to one QP: the
// requests its peer sends it, and the responses to its own requests.
type qpFlow struct {
	id    FlowID
	first int // frame of the flow's first packet
	req   reqState
	resp  respState
}

type recentPkt struct {
	psn   bth.PSN
	icrc  uint32
	frame int
}

type readReq struct {
	psn      bth.PSN
	dmaLen   uint32
	n        int // PSNs the read consumes; 0 while unknown
	frame    int
	nextResp bth.PSN // next expected response PSN
	bytes    uint64  // response bytes seen
	started  bool    // a response was seen
	done     bool
}

type msgEnd struct {
	psn   bth.PSN // PSN of the message's last packet
	frame int
}

// reqState follows the requests sent to a QP.
type reqState struct {
	started   bool
	next      bth.PSN // expected next PSN
	resending bool
	inMsg     bool // inside a multi-packet message
	msgKind   bth.Kind
	seqKnown  bool // inMsg is known (not right after a gap or the capture start)
	mtu       int  // path MTU, 0 until inferred
	mtuFrame  int
	pendRead  int // index+1 in reads of a READ whose PSN count waits on the next request
	nakSeen   bool
	recent    [64]recentPkt
	nRecent   int
	reads     []readReq
	atomics   []msgEnd
	ends      []msgEnd // message ends since the last acknowledged PSN
	gapAt     int      // frame of the last gap or unknown PSN consumption
	lastFrame int
	sport     uint16  // UDP source port of the last request
	peer      *qpFlow // the flow carrying the responses

	// The first request, against which Finish checks what RDMA CM set up.
	firstPSN   bth.PSN
	firstFrame int
	transport  bth.Transport
}

// respState follows the responses a QP receives to its requests.
type respState struct {
	haveAck  bool
	ackPSN   bth.PSN // last acknowledged PSN (effective)
	ackFrame int     // frame that moved ackPSN last
	haveMSN  bool
	msn      uint32
	msnFrame int
	peer     *qpFlow // the flow carrying the requests
}

var pathMTUs = [...]int{256, 512, 1024, 2048, 4096}

func psnCount(dmaLen uint32, mtu int) int {
	if dmaLen == 0 {
		return 1
	}
	return int((uint64(dmaLen) + uint64(mtu) - 1) / uint64(mtu))
}

func (v *Verifier) flowFor(rec *Record) *qpFlow {
	p := &rec.P
	id := FlowID{Src: p.SrcIP(), Dst: p.DstIP(), DestQP: p.BTH().DestQP()}
	if p.Info.Transport == bth.TransportUD {
		id.UD = true
		if rec.hdr(bth.HdrDETH) {
			id.SrcQP = p.DETH().SrcQP()
		}
	}
	fl := v.flows[id]
	if fl == nil {
		fl = &qpFlow{id: id, first: rec.Frame}
		v.flows[id] = fl
		v.order = append(v.order, fl)
	}
	return fl
}

func (v *Verifier) flow(rec *Record) {
	info := rec.P.Info
	switch {
	case info.Kind == bth.KindCNP:
		if !rec.P.BTH().BECN() {
			v.report(rec.Frame, SevFlow, "cnp", nil, "congestion notification without the becn bit")
		}
	case info.Request:
		v.request(rec, v.flowFor(rec))
	case info.Kind == bth.KindAck || info.Kind == bth.KindAtomicAck || info.Kind == bth.KindReadResponse:
		v.response(rec, v.flowFor(rec))
	}
}

func psnStr(p bth.PSN) string { return appendHexStr(uint64(p), 6) }

func (v *Verifier) request(rec *Record, fl *qpFlow) {
	p := &rec.P
	bt := p.BTH()
	info := p.Info
	psn := bt.PSN()
	r := &fl.req
	n := rec.Frame
	itoa := strconv.Itoa
	r.lastFrame = n
	r.sport = p.SrcPort()

	consumed := 1
	isRead := info.Kind == bth.KindReadRequest
	placed := info.Kind == bth.KindFlush || info.Kind == bth.KindAtomicWrite
	var dma uint32
	if isRead {
		if !rec.hdr(bth.HdrRETH) {
			consumed = 0 // unknown
		} else {
			dma = p.RETH().DMALen()
			if r.mtu != 0 {
				consumed = psnCount(dma, r.mtu)
			} else {
				consumed = 0
			}
		}
	}

	if !r.started {
		r.started = true
		r.next = psn
		r.gapAt = n
		r.firstPSN, r.firstFrame, r.transport = psn, n, info.Transport
	} else if r.pendRead != 0 {
		v.settleRead(r, psn, n, fl)
	}

	d := psn.Sub(r.next)
	newPkt := d >= 0
	switch {
	case d == 0:
		r.resending = false
	case d > 0:
		v.report(n, SevFlow, "psn_gap", fl, "psn gap: expected "+psnStr(r.next)+", got "+psnStr(psn)+" ("+itoa(d)+" missing)")
		r.resending = false
		r.seqKnown = false
		r.gapAt = n
	default:
		var icrc uint32
		if rec.ICRCChecked() {
			icrc = p.ICRC()
		}
		if dup := r.findRecent(psn, icrc); dup != 0 {
			v.report(n, SevFlow, "duplicate", fl, "duplicate of frame "+itoa(dup)+" (psn "+psnStr(psn)+")")
		} else if !r.resending {
			why := "no nak seen: timeout?"
			if r.nakSeen {
				why = "after a nak"
			}
			v.report(n, SevFlow, "retransmission", fl, "retransmission from psn "+psnStr(psn)+" (expected "+psnStr(r.next)+", "+itoa(-d)+" back, "+why+")")
			r.resending = true
		}
	}
	r.nakSeen = false
	r.remember(psn, p, rec)

	// Opcode sequence and path MTU, for new packets of connected QPs.
	if newPkt && info.Transport != bth.TransportUD {
		v.checkSequence(rec, fl)
		v.checkMTU(rec, fl)
	}

	if !newPkt {
		// A resent packet may end a message whose first copy was lost.
		if info.Pos == bth.PosLast || (info.Pos == bth.PosOnly && !isRead) {
			r.addEnd(psn, n)
		}
		if consumed > 0 {
			if end := psn.Add(consumed); r.next.Less(end) {
				r.next = end
			}
		}
		if isRead || placed {
			// A repeated READ (FLUSH, ATOMIC_WRITE): its responses will repeat too.
			for i := range r.reads {
				if r.reads[i].psn == psn {
					r.reads[i].nextResp, r.reads[i].bytes, r.reads[i].done = psn, 0, false
				}
			}
		}
		return
	}
	switch {
	case isRead:
		r.reads = append(r.reads, readReq{psn: psn, dmaLen: dma, n: consumed, frame: n, nextResp: psn})
		if len(r.reads) > 64 {
			r.reads = r.reads[:copy(r.reads, r.reads[1:])]
			r.pendRead = max(r.pendRead-1, 0)
		}
		if consumed == 0 {
			r.pendRead = len(r.reads)
			r.next = psn.Next() // at least one; settled at the next request
		} else {
			r.next = psn.Add(consumed)
			r.ends = append(r.ends, msgEnd{psn.Add(consumed - 1), n})
		}
	case placed:
		// Answered by a READ response ONLY of no bytes (IBA 1.5 annex
		// A19, as rdma_rxe answers them).
		r.reads = append(r.reads, readReq{psn: psn, n: 1, frame: n, nextResp: psn})
		if len(r.reads) > 64 {
			r.reads = r.reads[:copy(r.reads, r.reads[1:])]
			r.pendRead = max(r.pendRead-1, 0)
		}
		r.next = psn.Next()
		r.ends = append(r.ends, msgEnd{psn, n})
	case info.Kind == bth.KindCompareSwap || info.Kind == bth.KindFetchAdd:
		r.atomics = append(r.atomics, msgEnd{psn, n})
		if len(r.atomics) > 64 {
			r.atomics = r.atomics[:copy(r.atomics, r.atomics[1:])]
		}
		r.next = psn.Next()
		r.ends = append(r.ends, msgEnd{psn, n})
	default:
		r.next = psn.Next()
		if info.Pos == bth.PosLast || info.Pos == bth.PosOnly {
			r.addEnd(psn, n)
		}
	}
	if len(r.ends) > 4096 {
		r.ends = r.ends[:copy(r.ends, r.ends[len(r.ends)-4096:])]
		r.gapAt = n
	}
}

// settleRead works out how many PSNs the pending READ consumed from the
// PSN of the request that follows it, and what that says of the MTU.
func (v *Verifier) settleRead(r *reqState, psn bth.PSN, n int, fl *qpFlow) {
	rd := &r.reads[r.pendRead-1]
	r.pendRead = 0
	d := psn.Sub(rd.psn)
	if d <= 0 || d > 1<<22 {
		return // a retransmission or a gap: nothing to learn
	}
	var fitBuf [len(pathMTUs)]int
	fit := fitBuf[:0]
	for _, m := range pathMTUs {
		if psnCount(rd.dmaLen, m) == d {
			fit = append(fit, m)
		}
	}
	switch {
	case len(fit) == 0 && d > psnCount(rd.dmaLen, 256):
		// More PSNs than any MTU explains: packets went missing in between.
		rd.n = psnCount(rd.dmaLen, 256)
		r.next = rd.psn.Add(rd.n)
	case len(fit) == 0:
		v.report(n, SevFlow, "read_response", fl, "read request at psn "+psnStr(rd.psn)+" (frame "+strconv.Itoa(rd.frame)+", dma_len "+
			strconv.FormatUint(uint64(rd.dmaLen), 10)+") is followed by psn "+psnStr(psn)+": "+strconv.Itoa(d)+" psns fit no path mtu")
		r.next = psn
		r.gapAt = n
	default:
		rd.n = d
		r.next = psn
		if len(fit) == 1 && r.mtu == 0 {
			r.mtu, r.mtuFrame = fit[0], rd.frame
		}
	}
	if rd.n > 0 {
		r.ends = append(r.ends, msgEnd{rd.psn.Add(rd.n - 1), rd.frame})
	}
}

// addEnd records that a message ends at psn, keeping r.ends in PSN order
// without duplicates.
func (r *reqState) addEnd(psn bth.PSN, frame int) {
	i := len(r.ends)
	for i > 0 && psn.Sub(r.ends[i-1].psn) <= 0 {
		if r.ends[i-1].psn == psn {
			return
		}
		i--
	}
	r.ends = append(r.ends, msgEnd{})
	copy(r.ends[i+1:], r.ends[i:])
	r.ends[i] = msgEnd{psn, frame}
}

func (r *reqState) remember(psn bth.PSN, p *bth.Packet, rec *Record) {
	icrc := uint32(0)
	if rec.ICRCChecked() {
		icrc = p.ICRC()
	}
	r.recent[r.nRecent%len(r.recent)] = recentPkt{psn: psn, icrc: icrc, frame: rec.Frame}
	r.nRecent++
}

// findRecent returns the frame of a recent packet with the same PSN and
// ICRC (the same bytes, IP ID included), or 0.
func (r *reqState) findRecent(psn bth.PSN, icrc uint32) int {
	if icrc == 0 {
		return 0
	}
	for i := 0; i < min(r.nRecent, len(r.recent)); i++ {
		if e := r.recent[i]; e.psn == psn && e.icrc == icrc {
			return e.frame
		}
	}
	return 0
}

func (v *Verifier) checkSequence(rec *Record, fl *qpFlow) {
	r := &fl.req
	info := rec.P.Info
	first := info.Pos == bth.PosFirst || info.Pos == bth.PosOnly
	if r.seqKnown {
		switch {
		case r.inMsg && first:
			v.report(rec.Frame, SevFlow, "sequence", fl, info.Name+" at psn "+psnStr(rec.P.BTH().PSN())+" while a "+r.msgKind.String()+" message is unfinished")
		case !r.inMsg && !first:
			v.report(rec.Frame, SevFlow, "sequence", fl, info.Name+" at psn "+psnStr(rec.P.BTH().PSN())+" without a first packet")
		case r.inMsg && info.Kind != r.msgKind:
			v.report(rec.Frame, SevFlow, "sequence", fl, info.Name+" continues a "+r.msgKind.String()+" message")
		}
	}
	if !r.seqKnown && !first {
		// Mid-message after a gap or at the start of the capture: resync
		// at the next message boundary.
		if info.Pos == bth.PosLast {
			r.seqKnown, r.inMsg = true, false
		}
		return
	}
	r.seqKnown = true
	r.inMsg = info.Pos == bth.PosFirst || info.Pos == bth.PosMiddle
	r.msgKind = info.Kind
}

// checkMTU infers the path MTU from full-size packets and checks the
// others against it.
func (v *Verifier) checkMTU(rec *Record, fl *qpFlow) {
	r := &fl.req
	v.checkPayloadMTU(rec, fl, r, rec.P.Info.Pos)
}

func (v *Verifier) checkPayloadMTU(rec *Record, fl *qpFlow, r *reqState, pos bth.Position) {
	n := rec.PayloadLen
	if n < 0 {
		return
	}
	info := rec.P.Info
	itoa := strconv.Itoa
	switch pos {
	case bth.PosFirst, bth.PosMiddle:
		if r.mtu == 0 {
			for _, m := range pathMTUs {
				if m == n {
					r.mtu, r.mtuFrame = n, rec.Frame
				}
			}
			if r.mtu == 0 {
				v.report(rec.Frame, SevFlow, "mtu", fl, info.Name+" carries "+itoa(n)+" bytes, not a path mtu")
			}
		} else if n != r.mtu {
			v.report(rec.Frame, SevFlow, "mtu", fl, info.Name+" carries "+itoa(n)+" bytes, the path mtu is "+itoa(r.mtu)+" (from frame "+itoa(r.mtuFrame)+")")
		}
	default:
		if r.mtu != 0 && n > r.mtu {
			v.report(rec.Frame, SevFlow, "mtu", fl, info.Name+" carries "+itoa(n)+" bytes, more than the path mtu "+itoa(r.mtu)+" (from frame "+itoa(r.mtuFrame)+")")
		}
	}
}

// pair finds the request flow that the responses of fl answer: a flow in
// the opposite direction that sent a request at psn. When several could,
// the one whose UDP source port matches wins (rxe and ConnectX use the
// same port in both directions of a QP pair), then the closest PSN.
func (v *Verifier) pair(fl *qpFlow, psn bth.PSN, kind bth.Kind, sport uint16) *qpFlow {
	if fl.resp.peer != nil {
		return fl.resp.peer
	}
	var best *qpFlow
	bestScore := -1
	for _, c := range v.order {
		if c.id.Src != fl.id.Dst || c.id.Dst != fl.id.Src || c.id.UD || !c.req.started || c.req.peer != nil {
			continue
		}
		r := &c.req
		dist := -1
		switch kind {
		case bth.KindReadResponse:
			for i := range r.reads {
				if d := psn.Sub(r.reads[i].psn); d >= 0 && (r.reads[i].n == 0 || d < r.reads[i].n) {
					dist = d
				}
			}
		case bth.KindAtomicAck:
			for _, a := range r.atomics {
				if a.psn == psn {
					dist = 0
				}
			}
		default:
			if d := r.next.Sub(psn); d >= 0 && d <= 256 {
				dist = d
			}
		}
		if dist < 0 {
			continue
		}
		score := 1000 - min(dist, 999)
		if r.sport == sport {
			score += 1000
		}
		if score > bestScore {
			best, bestScore = c, score
		}
	}
	if best != nil {
		best.req.peer, fl.resp.peer = fl, best
	}
	return best
}

func (v *Verifier) response(rec *Record, fl *qpFlow) {
	p := &rec.P
	info := p.Info
	psn := p.BTH().PSN()
	n := rec.Frame
	s := &fl.resp
	itoa := strconv.Itoa
	peer := v.pair(fl, psn, info.Kind, p.SrcPort())
	var r *reqState
	if peer != nil {
		r = &peer.req
	}

	switch info.Kind {
	case bth.KindReadResponse:
		if r != nil {
			v.readResponse(rec, fl, r)
		}
	case bth.KindAtomicAck:
		if r != nil {
			found := false
			for _, a := range r.atomics {
				if a.psn == psn {
					found = true
				}
			}
			if !found {
				v.report(n, SevFlow, "atomic", fl, "atomic acknowledge for psn "+psnStr(psn)+" matches no atomic request")
			}
		}
	}

	if !rec.hdr(bth.HdrAETH) {
		return
	}
	e := p.AETH()
	syn, msn := e.Syndrome(), e.MSN()
	eff := psn // the last PSN this response acknowledges
	switch syn.Kind() {
	case bth.AckKindNAK:
		v.report(n, SevFlow, "nak", fl, "nak "+syn.CodeName()+" (code "+itoa(int(syn.Value()))+") at psn "+psnStr(psn)+", msn "+itoa(int(msn)))
		if r != nil {
			r.nakSeen = true
		}
		eff = psn.Add(-1)
	case bth.AckKindRNR:
		v.report(n, SevFlow, "rnr_nak", fl, "rnr nak at psn "+psnStr(psn)+": retry after timer code "+itoa(int(syn.Value()))+
			" ("+strconv.FormatFloat(float64(bth.RNRTimerMicros[syn.Value()])/1000, 'f', -1, 64)+" ms), msn "+itoa(int(msn)))
		if r != nil {
			r.nakSeen = true
		}
		eff = psn.Add(-1)
	case bth.AckKindReserved:
		return
	}
	if info.Kind == bth.KindReadResponse && info.Pos == bth.PosFirst {
		return // the MSN of a READ's first response packet is not yet the read's
	}

	if info.Kind == bth.KindAck && s.haveAck && syn.Kind() == bth.AckKindACK && psn.Less(s.ackPSN) {
		v.report(n, SevFlow, "ack", fl, "ack for psn "+psnStr(psn)+" is behind the previous ack ("+psnStr(s.ackPSN)+")")
	}
	// Hardware sniffers (ibdump) capture each direction on its own, so a
	// response may come before its request in the file: what it answers
	// is checked only once every request up to it was seen.

	// MSN: never back; forward by one per message completed.
	if s.haveMSN {
		dm := int(bth.PSN(msn).Sub(bth.PSN(s.msn)))
		switch {
		case dm < 0:
			v.report(n, SevFlow, "msn", fl, "msn went back from "+itoa(int(s.msn))+" (frame "+itoa(s.msnFrame)+") to "+itoa(int(msn)))
		case r != nil && s.haveAck && eff.Sub(s.ackPSN) > 0 && eff.Less(r.next) && r.gapAt < s.ackFrame:
			want := 0
			for _, m := range r.ends {
				if m.psn.Sub(s.ackPSN) > 0 && m.psn.Sub(eff) <= 0 {
					want++
				}
			}
			if dm != want {
				v.report(n, SevFlow, "msn", fl, "msn moved from "+itoa(int(s.msn))+" to "+itoa(int(msn))+" while "+itoa(want)+
					" messages completed (psn "+psnStr(s.ackPSN)+" to "+psnStr(eff)+")")
			}
		}
	}
	if !s.haveMSN || !bth.PSN(msn).Less(bth.PSN(s.msn)) {
		s.msn, s.msnFrame, s.haveMSN = msn, n, true
	}
	if !s.haveAck || s.ackPSN.Less(eff) {
		s.ackPSN, s.ackFrame, s.haveAck = eff, n, true
	}
	if r != nil {
		// Forget message ends that are acknowledged.
		k := 0
		for k < len(r.ends) && r.ends[k].psn.Sub(s.ackPSN) <= 0 {
			k++
		}
		r.ends = r.ends[:copy(r.ends, r.ends[k:])]
	}
}

// readResponse checks a READ response packet against its request: PSN
// range, position, payload sizes and the total length.
func (v *Verifier) readResponse(rec *Record, fl *qpFlow, r *reqState) {
	p := &rec.P
	info := p.Info
	psn := p.BTH().PSN()
	n := rec.Frame
	itoa := strconv.Itoa
	var rd *readReq
	for i := len(r.reads) - 1; i >= 0; i-- {
		c := &r.reads[i]
		if d := psn.Sub(c.psn); d >= 0 && (c.n == 0 || d < c.n) {
			rd = c
			break
		}
	}
	if rd == nil {
		v.report(n, SevFlow, "read_response", fl, info.Name+" at psn "+psnStr(psn)+" matches no read request")
		return
	}
	first := info.Pos == bth.PosFirst || info.Pos == bth.PosOnly
	last := info.Pos == bth.PosLast || info.Pos == bth.PosOnly
	if first && psn != rd.psn {
		v.report(n, SevFlow, "read_response", fl, info.Name+" at psn "+psnStr(psn)+", the read request (frame "+itoa(rd.frame)+") is at psn "+psnStr(rd.psn))
		return
	}
	if first {
		if rd.started {
			v.report(n, SevFlow, "duplicate", fl, "read at psn "+psnStr(rd.psn)+" (frame "+itoa(rd.frame)+") answered again")
		}
		rd.started, rd.bytes, rd.nextResp, rd.done = true, 0, psn, false
	} else if !rd.started {
		return // the capture began inside the response
	}
	if psn != rd.nextResp {
		v.report(n, SevFlow, "read_response", fl, info.Name+" at psn "+psnStr(psn)+", expected psn "+psnStr(rd.nextResp)+" of the read at frame "+itoa(rd.frame))
		rd.started = false
		return
	}
	v.checkPayloadMTU(rec, fl, r, info.Pos)
	if rec.PayloadLen > 0 {
		rd.bytes += uint64(rec.PayloadLen)
	}
	rd.nextResp = psn.Next()
	if last {
		rd.done = true
		got := psn.Sub(rd.psn) + 1
		if rd.bytes != uint64(rd.dmaLen) && rec.Status == StatusOK {
			v.report(n, SevFlow, "read_response", fl, "read at psn "+psnStr(rd.psn)+" (frame "+itoa(rd.frame)+") asked for "+
				strconv.FormatUint(uint64(rd.dmaLen), 10)+" bytes and got "+strconv.FormatUint(rd.bytes, 10))
		}
		if rd.n != 0 && got != rd.n {
			v.report(n, SevFlow, "read_response", fl, "read at psn "+psnStr(rd.psn)+" (frame "+itoa(rd.frame)+") ended after "+itoa(got)+" packets, expected "+itoa(rd.n))
		}
		if r.mtu != 0 && got != psnCount(rd.dmaLen, r.mtu) {
			v.report(n, SevFlow, "read_response", fl, "read at psn "+psnStr(rd.psn)+" of "+strconv.FormatUint(uint64(rd.dmaLen), 10)+
				" bytes took "+itoa(got)+" packets, "+itoa(psnCount(rd.dmaLen, r.mtu))+" at path mtu "+itoa(r.mtu))
		}
		if rd.n == 0 {
			rd.n = got
			if r.pendRead != 0 && &r.reads[r.pendRead-1] == rd {
				// The responses settle the PSN count before the next request does.
				r.pendRead = 0
				if r.next.Less(rd.psn.Add(got)) {
					r.next = rd.psn.Add(got)
				}
				r.ends = append(r.ends, msgEnd{psn, rd.frame})
			}
		}
	}
}
