package replay

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/uroce/uroce/bth"
)

// Pace says when a Session sends its next packet.
type Pace int

const (
	// PaceStep sends a packet once the live answers to what came before
	// it (as recorded) have arrived, or the timeout passed.
	PaceStep Pace = iota
	// PaceFast sends the requests back to back; it waits for the peer
	// only before a packet that answers the peer (an ACK, a READ
	// response), and at the end.
	PaceFast
	// PaceRecorded is PaceStep that also keeps the recorded gaps between
	// the packets it sends.
	PaceRecorded
)

// ParsePace parses "step", "fast" or "recorded".
func ParsePace(s string) (Pace, error) {
	switch s {
	case "step", "":
		return PaceStep, nil
	case "fast":
		return PaceFast, nil
	case "recorded":
		return PaceRecorded, nil
	}
	return 0, fmt.Errorf("pace %q: want step, fast or recorded", s)
}

func (p Pace) String() string { return [...]string{"step", "fast", "recorded"}[p] }

// Live is what differs in the live setup from the recording. Unset
// fields keep the recorded values.
type Live struct {
	// Local is this end (its MAC, IP and QPN), Peer the live peer.
	// A zero QPN keeps the recorded one.
	Local, Peer Endpoint
	// SrcPort is the UDP source port of the packets sent (0: as
	// recorded).
	SrcPort uint16
	// LocalPSN is the first PSN of this end's requests (what the
	// peer's QP expects), PeerPSN the first of the peer's; negative: as
	// recorded (LocalPSN) or learnt from the peer's first request
	// (PeerPSN).
	LocalPSN, PeerPSN int64
	// RKey and VA (when VASet) are the peer's memory that this end's
	// RDMA requests name: the recorded VAs move by VA minus the first
	// recorded one. RKey negative: as recorded.
	RKey  int64
	VA    uint64
	VASet bool
	// Own is what this end names of its own in the adverts it sends
	// (Conversation.Adverts); zero: as recorded, but for the GID, which
	// is always Local's.
	Own Own
	// Regions are buffers of the peer's whose live R_Key and VA are
	// known before the replay (from another conversation's adverts, as
	// perftest's): this end's requests to them are rewritten to the live
	// ones. The peer's adverts in this conversation add to them.
	Regions []Region
}

// Own is this end's side of the adverts it sends: the buffers the
// replay answers for (it plays at the frame level, so any addresses do,
// as long as the peer's requests name them back).
type Own struct {
	// Set: the recorded buffers move into the region of R_Key RKey at
	// VA (the lowest recorded one at VA).
	Set  bool
	RKey uint32
	VA   uint64
	// QPN and PSN (when PSNSet) replace perftest's QP fields, which
	// name the QP of another conversation (0: as recorded).
	QPN    uint32
	PSN    bth.PSN
	PSNSet bool
}

// Faults are made on purpose to this end's packets, numbered from 1 in
// the order they are sent.
type Faults struct {
	Drop, Dup, Corrupt, Reorder map[int]bool
	Delay                       map[int]time.Duration
}

// Options configure a Session.
type Options struct {
	Pace Pace
	// Timeout is how long a recorded answer is waited for (default 1s).
	Timeout time.Duration
	Faults  Faults
	// Tolerate names fields whose differences do not count (see Diff).
	Tolerate map[string]bool
	// AnswersOnly leaves the peer's own requests out: they are not waited
	// for, and this end's answers to them are not sent. For a peer that
	// only responds (the self peer).
	AnswersOnly bool
	// PeerSend, with AnswersOnly, makes the peer send its recorded
	// SENDs itself, when the peer's requests are all SENDs (otherwise,
	// those left out would leave gaps in its PSNs, and it is not used):
	// it is called for each when its turn comes (the packets this end
	// recorded before it sent), the SEND is then expected and this end's
	// ACKs of it are sent. For a self peer in a conversation whose SENDs
	// carry adverts (its own buffers' addresses, which this end learns).
	PeerSend func(p *Packet) error
}

// Diff is one field of a live answer that differs from the recording.
// Fields: opcode, psn, syndrome, msn, length, payload, flags, dest_qpn,
// atomic_orig, rkey and va (of the peer's RDMA requests, in a
// conversation with adverts: they must name this end's advertised
// buffers); "coalesced" marks a recorded ACK that the live peer
// folded into a later one (an ACK for a later PSN came instead).
type Diff struct {
	Field     string `json:"field"`
	Recorded  string `json:"recorded"`
	Live      string `json:"live"`
	Tolerated bool   `json:"tolerated,omitempty"`
}

// Answer is one recorded answer of the peer and the live one that stands
// for it.
type Answer struct {
	Frame         int     `json:"frame"` // of the recorded answer in the capture
	Recorded      string  `json:"recorded"`
	Live          string  `json:"live,omitempty"`
	Missing       bool    `json:"missing,omitempty"`
	Diffs         []Diff  `json:"diffs,omitempty"`
	DelayUS       float64 `json:"delay_us,omitempty"`          // from the packet sent before it
	RecordedDelay float64 `json:"recorded_delay_us,omitempty"` // the same in the recording
}

// Report is the outcome of a replay.
type Report struct {
	Conversation string   `json:"conversation"`
	Played       string   `json:"played"`
	Pace         string   `json:"pace"`
	Sent         int      `json:"sent"`
	Dropped      int      `json:"dropped,omitempty"`
	Duplicated   int      `json:"duplicated,omitempty"`
	Corrupted    int      `json:"corrupted,omitempty"`
	Answers      []Answer `json:"answers"`
	Unexpected   []string `json:"unexpected,omitempty"`
	// DupAnswers counts the live peer's answers to a request this end
	// sent twice (--dup), left out of the answers: a responder answers a
	// duplicate again (IBTA 9.7.5.1.1: an ACK, a READ's responses, an
	// atomic's saved result), and the recording had no duplicate to
	// answer.
	DupAnswers int `json:"dup_answers,omitempty"`
	// CNPs counts the congestion notifications the live peer sent: not
	// answers (a conversation leaves the recorded ones out too).
	CNPs int `json:"cnps,omitempty"`
	// Resent counts, with --tolerate resent, the live peer's requests
	// that came again at a PSN it had sent already (a retransmission of
	// its own, for an answer of this end's that came later than its
	// timers wanted), left out of the answers; without it they are
	// answers that differ.
	Resent      int            `json:"resent,omitempty"`
	BadICRC     int            `json:"bad_icrc,omitempty"`
	Differences map[string]int `json:"differences,omitempty"` // counted fields, tolerated ones left out
	Agree       bool           `json:"agree"`
}

// step is one packet this end sends.
type step struct {
	p      *Packet
	n      int  // from 1
	before int  // peer packets recorded before it
	answer bool // it answers the peer (not a request)
}

type held struct {
	frame []byte
	due   time.Time
}

// Session plays one end of a conversation. Its methods are called from
// one goroutine.
type Session struct {
	conv *Conversation
	me   int
	live Live
	opt  Options

	plan []step
	exp  []*Packet // the peer's packets, in order
	// recDelay is, for each of exp, the recorded time from this end's
	// packet before it, in µs (0 when this end had sent none).
	recDelay map[*Packet]float64

	next     int // plan index of the next packet to send
	matched  int // expected answers matched or given up
	waitFrom time.Time
	lastSent time.Time
	lastRec  time.Duration // recorded time of the last packet sent
	started  bool
	done     bool
	limit    int  // frame before which this part of the replay ends (0: none)
	paused   bool // at the limit
	// order is the frame before which this end may send, set by a Group
	// from the other conversations' next packets and answers (0: none).
	order int

	ourBase, peerBase bth.PSN // recorded first PSNs
	ourOff, peerOff   int
	peerKnown         bool
	peerHigh          bth.PSN // the highest PSN of a live request of the peer's ...
	peerSeen          bool    // ... once one came
	vaBase            uint64
	refused           map[int]bool // frames whose keys and addresses stay as recorded
	// Adverts: this end's recorded ones (lowest VA ownBase), and the
	// peer's buffers as recorded and live.
	own     []Advert
	ownBase uint64
	regions []Region

	peerSends []int // indexes in exp of the peer's SENDs that PeerSend makes
	peerNext  int   // the next of them to make

	dups     []bth.PSN // live PSNs of the requests sent twice
	respHigh bth.PSN   // the highest recorded PSN of a response matched ...
	respSeen bool      // ... once one was
	out      [][]byte
	hold     []held
	buf      []byte
	rep      Report
	parsed   bth.Packet
}

// NewSession prepares to play end me (0 or 1) of c.
func NewSession(c *Conversation, me int, live Live, opt Options) (*Session, error) {
	if me != 0 && me != 1 {
		return nil, fmt.Errorf("end %d: want 0 or 1", me)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = time.Second
	}
	s := &Session{conv: c, me: me, live: live, opt: opt, buf: make([]byte, 1<<16)}
	peer := 1 - me
	if s.live.Local.QPN == 0 {
		s.live.Local.QPN = c.Ends[me].QPN
	}
	if s.live.Peer.QPN == 0 {
		s.live.Peer.QPN = c.Ends[peer].QPN
	}
	if !s.live.Local.IP.IsValid() {
		s.live.Local.IP = c.Ends[me].IP
	}
	if !s.live.Peer.IP.IsValid() {
		s.live.Peer.IP = c.Ends[peer].IP
	}
	if s.live.Local.MAC == ([6]byte{}) {
		s.live.Local.MAC = c.Ends[me].MAC
	}
	if s.live.Peer.MAC == ([6]byte{}) {
		s.live.Peer.MAC = c.Ends[peer].MAC
	}
	s.refused = c.Refused(me)
	ourSet, peerSet, vaSet := false, false, false
	before := 0
	s.recDelay = map[*Packet]float64{}
	var lastOwn time.Duration = -1
	for i := range c.Packets { // PeerSend can make all of the peer's requests, or none
		if p := &c.Packets[i]; p.From == peer && p.Request() && p.H.Info().Kind != bth.KindSend {
			opt.PeerSend = nil
		}
	}
	s.opt.PeerSend = opt.PeerSend
	peerSend := func(p *Packet) bool { // a SEND of the peer's that PeerSend makes
		return opt.PeerSend != nil && opt.AnswersOnly && p.Request() && p.H.Info().Kind == bth.KindSend
	}
	sendPSNs := map[bth.PSN]bool{}
	for i := range c.Packets {
		if p := &c.Packets[i]; p.From == peer && peerSend(p) {
			sendPSNs[p.H.BTH.PSN] = true
		}
	}
	for i := range c.Packets {
		p := &c.Packets[i]
		if p.From == me {
			lastOwn = p.Time
		} else if lastOwn >= 0 {
			s.recDelay[p] = float64((p.Time - lastOwn).Nanoseconds()) / 1e3
		}
		if p.From == peer {
			if p.Request() && !peerSet {
				s.peerBase, peerSet = p.H.BTH.PSN, true
			}
			if opt.AnswersOnly && p.Request() && !peerSend(p) {
				continue
			}
			if peerSend(p) {
				s.peerSends = append(s.peerSends, len(s.exp))
			}
			s.exp = append(s.exp, p)
			before++
			continue
		}
		if opt.AnswersOnly && !p.Request() && !(p.H.Info().Kind == bth.KindAck && sendPSNs[p.H.BTH.PSN]) {
			continue
		}
		s.plan = append(s.plan, step{p: p, n: len(s.plan) + 1, before: before, answer: !p.Request()})
		if p.Request() && !ourSet {
			s.ourBase, ourSet = p.H.BTH.PSN, true
		}
		if p.Request() && !vaSet && !s.refused[p.Frame] {
			if p.H.Info().Has(bth.HdrRETH) {
				s.vaBase, vaSet = p.H.VA, true
			} else if p.H.Info().Has(bth.HdrAtomicETH) {
				s.vaBase, vaSet = p.H.AtomicVA, true
			}
		}
	}
	if len(s.plan) == 0 {
		return nil, fmt.Errorf("%v sent nothing in this conversation: play the other end", c.Ends[me])
	}
	s.regions = append(s.regions, live.Regions...)
	for _, st := range s.plan {
		if a, ok := ParseAdvert(c.Adverts, st.p.Payload); ok && st.p.H.Info().Kind == bth.KindSend {
			if len(s.own) == 0 || a.VA < s.ownBase {
				s.ownBase = a.VA
			}
			s.own = append(s.own, a)
		}
	}
	if live.LocalPSN >= 0 {
		s.ourOff = bth.PSN(live.LocalPSN & bth.PSNMask).Sub(s.ourBase)
	}
	if live.PeerPSN >= 0 {
		s.peerOff, s.peerKnown = bth.PSN(live.PeerPSN&bth.PSNMask).Sub(s.peerBase), true
	}
	s.rep = Report{Conversation: c.String(), Played: c.Ends[me].String(), Pace: opt.Pace.String(), Differences: map[string]int{}}
	return s, nil
}

// Done reports whether the replay is over: every packet sent and every
// recorded answer matched or given up; or, under a Limit, every one
// recorded before it.
func (s *Session) Done() bool { return s.done || s.paused }

// Limit makes the session play only the recorded packets before the
// capture's frame number frame (0: all of them): once it has sent those
// and the answers recorded before frame came (or timed out), Done
// reports true until a later Limit lets it go on. Several conversations
// of one capture (Group) are played in their recorded order this way.
func (s *Session) Limit(frame int) { s.limit, s.paused = frame, false }

// frontier returns the capture's frame of the first thing this end
// still waits for: its next packet to send or the next recorded answer
// (0: none).
func (s *Session) frontier() int {
	f := 0
	if s.next < len(s.plan) {
		f = s.plan[s.next].p.Frame
	}
	if s.matched < len(s.exp) {
		if a := s.exp[s.matched].Frame; f == 0 || a < f {
			f = a
		}
	}
	return f
}

// Report returns the outcome so far.
func (s *Session) Report() *Report {
	r := s.rep
	r.Agree = len(r.Unexpected) == 0 && r.BadICRC == 0
	for _, a := range r.Answers {
		if a.Missing {
			r.Agree = false
		}
		for _, d := range a.Diffs {
			if !d.Tolerated {
				r.Agree = false
			}
		}
	}
	return &r
}

// Poll advances the session to now: it returns the frames to transmit
// (valid until the next call) and when it next wants to be called (zero
// when it is done).
func (s *Session) Poll(now time.Time) ([][]byte, time.Time) {
	s.out = s.out[:0]
	var wake time.Time
	soon := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	// Frames held by a delay or a reorder.
	k := 0
	for _, h := range s.hold {
		if !h.due.IsZero() && !now.Before(h.due) {
			s.out = append(s.out, h.frame)
			continue
		}
		if !h.due.IsZero() {
			soon(h.due)
		}
		s.hold[k] = h
		k++
	}
	s.hold = s.hold[:k]
	s.paused = false
	for s.next < len(s.plan) {
		s.postPeer()
		st := &s.plan[s.next]
		if s.limit > 0 && st.p.Frame >= s.limit {
			break
		}
		if s.opt.Pace != PaceFast || st.answer {
			if t, ok := s.waitAnswers(st.before, now); !ok {
				soon(t)
				return s.out, wake
			}
		}
		if s.opt.Pace != PaceFast && s.order > 0 && st.p.Frame > s.order {
			return s.out, wake // another conversation's turn (Group)
		}
		if s.opt.Pace == PaceRecorded && s.started {
			due := s.lastSent.Add(st.p.Time - s.lastRec)
			if now.Before(due) {
				soon(due)
				return s.out, wake
			}
		}
		s.send(st, now)
		s.next++
	}
	s.postPeer()
	for s.peerNext < len(s.peerSends) { // the peer's last SENDs wait for the answers before them
		j := s.peerSends[s.peerNext]
		if s.next < len(s.plan) && s.plan[s.next].before <= j {
			break
		}
		if t, ok := s.waitAnswers(j, now); !ok {
			soon(t)
			return s.out, wake
		}
		before := s.peerNext
		s.postPeer()
		if s.peerNext == before {
			break
		}
	}
	n := len(s.exp)
	if s.limit > 0 {
		for n > 0 && s.exp[n-1].Frame >= s.limit {
			n--
		}
	}
	if t, ok := s.waitAnswers(n, now); !ok {
		soon(t)
		return s.out, wake
	}
	if s.next < len(s.plan) || n < len(s.exp) {
		s.paused = true
		return s.out, wake
	}
	for _, h := range s.hold { // a reorder of the last packet: nothing came after it
		s.out = append(s.out, h.frame)
	}
	s.hold = s.hold[:0]
	s.done = true
	return s.out, time.Time{}
}

// postPeer makes the peer send its SENDs (Options.PeerSend) whose turn
// has come: those recorded before this end's next packet, once the
// answers recorded before them are in (or given up), so that they come
// in the recorded order.
func (s *Session) postPeer() {
	for s.peerNext < len(s.peerSends) {
		j := s.peerSends[s.peerNext]
		if s.next < len(s.plan) && s.plan[s.next].before <= j {
			return
		}
		if s.matched < j {
			return
		}
		s.peerNext++
		if err := s.opt.PeerSend(s.exp[j]); err != nil {
			s.rep.Unexpected = append(s.rep.Unexpected, fmt.Sprintf("the peer's SEND of frame %d not made: %v", s.exp[j].Frame, err))
		}
	}
}

// waitAnswers reports whether the first n recorded answers are matched
// or given up; if not, when the wait for them ends.
func (s *Session) waitAnswers(n int, now time.Time) (time.Time, bool) {
	if s.matched >= n {
		s.waitFrom = time.Time{}
		return time.Time{}, true
	}
	if s.waitFrom.IsZero() {
		s.waitFrom = now
	}
	end := s.waitFrom.Add(s.opt.Timeout)
	if now.Before(end) {
		return end, false
	}
	for s.matched < n {
		p := s.exp[s.matched]
		s.rep.Answers = append(s.rep.Answers, Answer{Frame: p.Frame, Recorded: s.describe(&p.H, len(p.Payload), true), Missing: true,
			RecordedDelay: s.recDelay[p]})
		s.rep.Differences["missing"]++
		s.matched++
	}
	s.waitFrom = time.Time{}
	return time.Time{}, true
}

// send rewrites the packet of st for the live setup and queues it, with
// its faults.
func (s *Session) send(st *step, now time.Time) {
	s.started = true
	s.lastSent, s.lastRec = now, st.p.Time
	var h bth.Headers = st.p.H
	h.L2L3.SrcMAC, h.L2L3.DstMAC = s.live.Local.MAC, s.live.Peer.MAC
	h.L2L3.SrcIP, h.L2L3.DstIP = s.live.Local.IP, s.live.Peer.IP
	if s.live.SrcPort != 0 {
		h.L2L3.SrcPort = s.live.SrcPort
	}
	h.BTH.DestQP = s.live.Peer.QPN
	if st.answer {
		h.BTH.PSN = h.BTH.PSN.Add(s.peerOff)
	} else {
		h.BTH.PSN = h.BTH.PSN.Add(s.ourOff)
	}
	info := h.Info()
	if info.Request && !s.refused[st.p.Frame] {
		if info.Has(bth.HdrRETH) {
			h.RKey, h.VA = s.liveAddr(h.RKey, h.VA)
		}
		if info.Has(bth.HdrAtomicETH) {
			h.AtomicRKey, h.AtomicVA = s.liveAddr(h.AtomicRKey, h.AtomicVA)
		}
	}
	if info.Has(bth.HdrDETH) {
		h.SrcQP = s.live.Local.QPN
	}
	payload := st.p.Payload
	if a, ok := ParseAdvert(s.conv.Adverts, payload); ok && info.Kind == bth.KindSend {
		payload = append([]byte(nil), payload...)
		a = s.ownLive(a)
		a.put(s.conv.Adverts, payload)
	}
	n, err := bth.Encode(s.buf, &h, payload)
	if err != nil {
		// A recorded packet decodes; re-encoding it cannot fail but for
		// a mixed IP family given by the caller.
		s.rep.Unexpected = append(s.rep.Unexpected, fmt.Sprintf("frame %d not re-encoded: %v", st.p.Frame, err))
		return
	}
	frame := append([]byte(nil), s.buf[:n]...)
	f := &s.opt.Faults
	if f.Drop[st.n] {
		s.rep.Dropped++
		return
	}
	if f.Corrupt[st.n] {
		frame[n-1] ^= 0xff // the ICRC's last byte: the peer must drop it
		s.rep.Corrupted++
	}
	s.rep.Sent++
	copies := 1
	if f.Dup[st.n] {
		copies = 2
		s.rep.Duplicated++
		if info.Request {
			s.dups = append(s.dups, h.BTH.PSN)
		}
	}
	for i := 0; i < copies; i++ {
		switch {
		case f.Delay[st.n] > 0:
			s.hold = append(s.hold, held{frame: frame, due: now.Add(f.Delay[st.n])})
		case f.Reorder[st.n]:
			s.hold = append(s.hold, held{frame: frame}) // goes after the next packet
		default:
			s.out = append(s.out, frame)
			s.releaseReordered()
		}
	}
}

// liveAddr rewrites the R_Key and VA of one of this end's requests: into
// the live buffer of the peer's advert that names them, or by the live
// setup's RKey and VA.
func (s *Session) liveAddr(rkey uint32, va uint64) (uint32, uint64) {
	for i := len(s.regions) - 1; i >= 0; i-- { // the latest advert of a buffer counts
		r := &s.regions[i]
		if r.Recorded.RKey == rkey && r.Recorded.Contains(va) {
			return r.Live.RKey, va - r.Recorded.VA + r.Live.VA
		}
	}
	if s.live.VASet {
		va = va - s.vaBase + s.live.VA
	}
	if s.live.RKey >= 0 {
		rkey = uint32(s.live.RKey)
	}
	return rkey, va
}

// ownLive is the live form of one of this end's recorded adverts.
func (s *Session) ownLive(a Advert) Advert {
	o := &s.live.Own
	if o.Set {
		a.RKey, a.VA = o.RKey, a.VA-s.ownBase+o.VA
	}
	if o.QPN != 0 {
		a.QPN = o.QPN
	}
	if o.PSNSet {
		a.PSN = o.PSN
	}
	if a.GID != ([16]byte{}) {
		a.GID = gidOf(s.live.Local.IP)
	}
	return a
}

// advertisedAddr is the R_Key and VA a request of the peer's recorded
// with wk and wv must name live: the same place in the buffer this end
// advertised.
func (s *Session) advertisedAddr(wk uint32, wv uint64) (uint32, uint64) {
	o := &s.live.Own
	if !o.Set {
		return wk, wv
	}
	for _, a := range s.own {
		if a.RKey == wk && a.Contains(wv) {
			return o.RKey, wv - s.ownBase + o.VA
		}
	}
	return wk, wv
}

// knows reports whether the latest region for rec's buffer is lv already
// (perftest sends its advert again at every handshake).
func (s *Session) knows(rec, lv Advert) bool {
	for i := len(s.regions) - 1; i >= 0; i-- {
		if r := s.regions[i]; r.Recorded.RKey == rec.RKey && r.Recorded.VA == rec.VA {
			return r.Live == lv
		}
	}
	return false
}

// Learnt returns the peer's buffers this session knows, recorded and
// live: those of Live.Regions and those the peer advertised (perftest's
// name the QP of its test conversation, which a replay of that one
// takes as its Live.Regions).
func (s *Session) Learnt() []Region { return append([]Region(nil), s.regions...) }

// releaseReordered sends the packets held back by a reorder, after the
// packet just queued.
func (s *Session) releaseReordered() {
	k := 0
	for _, h := range s.hold {
		if h.due.IsZero() {
			s.out = append(s.out, h.frame)
			continue
		}
		s.hold[k] = h
		k++
	}
	s.hold = s.hold[:k]
}

// Input takes a frame received from the link. Frames that are not the
// peer's packets to this end are ignored; it reports whether it took it.
func (s *Session) Input(frame []byte, now time.Time) bool {
	p := &s.parsed
	if err := bth.Parse(frame, p); err != nil || p.Version != 2 {
		return false
	}
	if p.SrcIP() != s.live.Peer.IP || p.DstIP() != s.live.Local.IP {
		return false
	}
	b := p.BTH()
	if b.DestQP() == 1 {
		return false
	}
	if !p.ICRCOK() {
		s.rep.BadICRC++
		return true
	}
	if p.Opcode() == bth.OpCNP {
		s.rep.CNPs++
		return true
	}
	var h bth.Headers
	p.Headers(&h)
	payload := p.Payload()
	if h.Info().Request {
		// Unless the recording has the peer send that PSN again next.
		expected := s.matched < len(s.exp) && s.exp[s.matched].Request() && s.peerKnown &&
			s.exp[s.matched].H.BTH.PSN.Add(int(s.peerOff)) == h.BTH.PSN
		if s.peerSeen && h.BTH.PSN.LessEq(s.peerHigh) && !expected && s.opt.Tolerate["resent"] {
			s.rep.Resent++
			return true
		}
		if !s.peerSeen || s.peerHigh.Less(h.BTH.PSN) {
			s.peerHigh, s.peerSeen = h.BTH.PSN, true
		}
	}
	var want *Packet
	if s.matched < len(s.exp) {
		want = s.exp[s.matched]
	}
	if s.dupAnswer(&h, want) {
		s.rep.DupAnswers++
		return true
	}
	if want == nil {
		s.rep.Unexpected = append(s.rep.Unexpected, s.describe(&h, len(payload), false))
		return true
	}
	if j := s.coalescedInto(&h); j > s.matched {
		for ; s.matched < j; s.matched++ {
			p := s.exp[s.matched]
			d := Diff{Field: "coalesced", Recorded: "ack", Live: "a later ack", Tolerated: s.opt.Tolerate["coalesced"]}
			if !d.Tolerated {
				s.rep.Differences["coalesced"]++
			}
			s.rep.Answers = append(s.rep.Answers, Answer{Frame: p.Frame, Recorded: s.describe(&p.H, len(p.Payload), true),
				Live: "folded into " + s.describe(&h, len(payload), false), Diffs: []Diff{d}, RecordedDelay: s.recDelay[p]})
		}
		want = s.exp[s.matched]
	}
	if h.Info().Request && !s.peerKnown && want.Request() {
		s.peerOff, s.peerKnown = h.BTH.PSN.Sub(want.H.BTH.PSN), true
	}
	if rec, ok := ParseAdvert(s.conv.Adverts, want.Payload); ok && want.H.Info().Kind == bth.KindSend && h.Info().Kind == bth.KindSend {
		if lv, ok := ParseAdvert(s.conv.Adverts, payload); ok && !s.knows(rec, lv) {
			s.regions = append(s.regions, Region{Recorded: rec, Live: lv})
		}
	}
	a := Answer{Frame: want.Frame, Recorded: s.describe(&want.H, len(want.Payload), true), Live: s.describe(&h, len(payload), false),
		RecordedDelay: s.recDelay[want]}
	if s.started {
		a.DelayUS = float64(now.Sub(s.lastSent).Nanoseconds()) / 1e3
	}
	a.Diffs = s.compare(want, &h, payload)
	for i := range a.Diffs {
		d := &a.Diffs[i]
		d.Tolerated = s.opt.Tolerate[d.Field]
		if !d.Tolerated {
			s.rep.Differences[d.Field]++
		}
	}
	s.rep.Answers = append(s.rep.Answers, a)
	s.matched++
	if !want.Request() && !h.Info().Request && (!s.respSeen || s.respHigh.Less(want.H.BTH.PSN)) {
		s.respHigh, s.respSeen = want.H.BTH.PSN, true
	}
	return true
}

// dupAnswer reports whether the live response h answers a request this
// end sent twice rather than the next recorded answer (want, nil when
// none is left): either the recorded answers up to its PSN were matched
// already and its PSN is at or after a duplicated request's (a responder
// answers a duplicate again: an ACK, a READ's responses, an atomic's
// saved result), or it is a plain ACK of a duplicated request's PSN
// that comes before want, a plain ACK of a later PSN.
func (s *Session) dupAnswer(h *bth.Headers, want *Packet) bool {
	if h.Info().Request || len(s.dups) == 0 {
		return false
	}
	rec := s.recPSN(h)
	answered := s.respSeen && rec.LessEq(s.respHigh)
	early := want != nil && isPlainACK(h) && isPlainACK(&want.H) && rec.Less(want.H.BTH.PSN)
	for _, p := range s.dups {
		if answered && p.LessEq(h.BTH.PSN) || early && p == h.BTH.PSN {
			return true
		}
	}
	return false
}

// coalescedInto returns, for a live ACK that acknowledges more than the
// next recorded answer (a plain ACK of an earlier PSN), the index of the
// recorded ACK it matches, if a run of plain ACKs leads to it; -1
// otherwise.
func (s *Session) coalescedInto(h *bth.Headers) int {
	if !isPlainACK(h) {
		return -1
	}
	got := s.recPSN(h)
	for j := s.matched; j < len(s.exp); j++ {
		w := &s.exp[j].H
		if !isPlainACK(w) {
			return -1
		}
		if w.BTH.PSN == got {
			return j
		}
		if !w.BTH.PSN.Less(got) {
			return -1
		}
	}
	return -1
}

func isPlainACK(h *bth.Headers) bool {
	return h.Info().Kind == bth.KindAck && h.Syndrome.Kind() == bth.AckKindACK
}

// recPSN maps the live PSN of the peer's packet back to the recording.
func (s *Session) recPSN(h *bth.Headers) bth.PSN {
	if h.Info().Request {
		return h.BTH.PSN.Add(-s.peerOff)
	}
	return h.BTH.PSN.Add(-s.ourOff)
}

func (s *Session) compare(want *Packet, h *bth.Headers, payload []byte) []Diff {
	var d []Diff
	add := func(field string, rec, live any) {
		d = append(d, Diff{Field: field, Recorded: fmt.Sprint(rec), Live: fmt.Sprint(live)})
	}
	w := &want.H
	if w.BTH.Opcode != h.BTH.Opcode {
		add("opcode", w.BTH.Opcode, h.BTH.Opcode)
		return d
	}
	if got := s.recPSN(h); got != w.BTH.PSN {
		add("psn", s.relPSN(w, w.BTH.PSN), s.relPSN(w, got))
	}
	if h.BTH.DestQP != s.live.Local.QPN {
		add("dest_qpn", fmt.Sprintf("%#x", s.live.Local.QPN), fmt.Sprintf("%#x", h.BTH.DestQP))
	}
	if w.BTH.SE != h.BTH.SE || w.BTH.AckReq != h.BTH.AckReq {
		add("flags", flags(w), flags(h))
	}
	info := w.Info()
	if info.Has(bth.HdrAETH) {
		if w.Syndrome != h.Syndrome {
			add("syndrome", synText(w.Syndrome), synText(h.Syndrome))
		}
		if w.MSN != h.MSN {
			add("msn", w.MSN, h.MSN)
		}
	}
	if info.Has(bth.HdrAtomicAck) && w.AtomicAckOrig != h.AtomicAckOrig {
		add("atomic_orig", fmt.Sprintf("%#x", w.AtomicAckOrig), fmt.Sprintf("%#x", h.AtomicAckOrig))
	}
	if s.conv.Adverts != AdvertNone && info.Request && !s.refused[want.Frame] {
		// The peer's requests must name the buffers this end advertised
		// (the recorded field is what it advertised, live).
		var wk, lk uint32
		var wv, lv uint64
		switch {
		case info.Has(bth.HdrRETH):
			wk, wv = s.advertisedAddr(w.RKey, w.VA)
			lk, lv = h.RKey, h.VA
		case info.Has(bth.HdrAtomicETH):
			wk, wv = s.advertisedAddr(w.AtomicRKey, w.AtomicVA)
			lk, lv = h.AtomicRKey, h.AtomicVA
		}
		if wk != lk {
			add("rkey", fmt.Sprintf("%#x", wk), fmt.Sprintf("%#x", lk))
		}
		if wv != lv {
			add("va", fmt.Sprintf("%#x", wv), fmt.Sprintf("%#x", lv))
		}
	}
	wp, lp := want.Payload, payload
	if _, ok := ParseAdvert(s.conv.Adverts, wp); ok && info.Kind == bth.KindSend && len(lp) == len(wp) {
		// An advert names the peer's live buffers: the rest must agree.
		wp, lp = maskAdvert(s.conv.Adverts, wp), maskAdvert(s.conv.Adverts, lp)
	}
	if len(wp) != len(lp) {
		add("length", len(wp), len(lp))
	} else if string(wp) != string(lp) {
		i := 0
		for i < len(lp) && lp[i] == wp[i] {
			i++
		}
		add("payload", fmt.Sprintf("byte %d: %#02x", i, wp[i]), fmt.Sprintf("%#02x", lp[i]))
	}
	return d
}

func flags(h *bth.Headers) string {
	var f []string
	if h.BTH.SE {
		f = append(f, "SE")
	}
	if h.BTH.AckReq {
		f = append(f, "A")
	}
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ",")
}

// relPSN writes the PSN of a packet of the peer's relative to the first
// PSN of its space: the peer's requests count from its first request,
// its answers from this end's first request.
func (s *Session) relPSN(h *bth.Headers, p bth.PSN) string {
	base := s.ourBase
	if h.Info().Request {
		base = s.peerBase
	}
	return fmt.Sprintf("+%d", p.Sub(base))
}

// describe writes a packet of the peer's in the recording's terms.
func (s *Session) describe(h *bth.Headers, n int, recorded bool) string {
	var b strings.Builder
	b.WriteString(h.Info().Name)
	psn := h.BTH.PSN
	if !recorded {
		psn = s.recPSN(h)
	}
	b.WriteString(" psn ")
	b.WriteString(s.relPSN(h, psn))
	if h.Info().Has(bth.HdrAETH) {
		fmt.Fprintf(&b, " %s msn %d", h.Syndrome.CodeName(), h.MSN)
	}
	if n > 0 {
		fmt.Fprintf(&b, " len %d", n)
	}
	return b.String()
}

// SortedDifferences returns the counted fields, most frequent first.
func (r *Report) SortedDifferences() []string {
	var f []string
	for k := range r.Differences {
		f = append(f, k)
	}
	sort.Slice(f, func(i, j int) bool {
		if r.Differences[f[i]] != r.Differences[f[j]] {
			return r.Differences[f[i]] > r.Differences[f[j]]
		}
		return f[i] < f[j]
	})
	return f
}

// synText names a syndrome with its value: credits=31, rnr_timer=12, or
// a NAK's code name.
func synText(s bth.Syndrome) string {
	if s.Kind() == bth.AckKindNAK {
		return s.CodeName()
	}
	return s.CodeName() + "=" + strconv.Itoa(int(s.Value()))
}
