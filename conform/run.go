package conform

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/replay"
	"github.com/uroce/uroce/stack"
)

// Env is the live setup a scenario runs in: this end and the peer's QP.
type Env struct {
	Local, Peer replay.Endpoint
	SrcPort     uint16        // UDP source port (default 49152)
	PSN         bth.PSN       // the first PSN the peer's QP expects
	RKey        uint32        // the peer's region
	VA          uint64        //
	Region      int           // its length
	PKey        uint16        // default 0xffff
	Timeout     time.Duration // how long an expected answer may take (default 1s)
	// PeerPSN is the first PSN of the peer's own requests; PeerPost
	// makes the peer post one (nil: the peer cannot be driven, and
	// scenarios with peer steps fail; a live peer whose stock client
	// posts by itself takes one that does nothing).
	PeerPSN  bth.PSN
	PeerPost func(p *Pkt) error
	// QKey is the Q_Key of the peer's QP, when it is a UD QP.
	QKey uint32
	// PeerDelivered returns how many receives the peer has completed
	// (nil: it does not show them, and delivered steps fail).
	PeerDelivered func() int
	// Tail says the peer's requests after the scenario's (those past
	// the PSNs its peer steps take) are a stock client's further
	// messages: the run answers them as a plain responder and matches
	// no step with them (a live peer driven by a stock client,
	// StockClient).
	Tail bool
	// MTU is the path MTU of the peer's requests (default 1024).
	MTU int
	// PostsAhead says the peer has posted all of the scenario's
	// requests at once, by itself (conform_peer): a frame that comes
	// while the run is at a peer step is taken as that request's, and
	// the steps go on, where otherwise it would come before its post.
	PostsAhead bool
}

// defaults fills in what env leaves out.
func (env Env) defaults() Env {
	if env.Timeout <= 0 {
		env.Timeout = time.Second
	}
	if env.PKey == 0 {
		env.PKey = 0xffff
	}
	if env.SrcPort == 0 {
		env.SrcPort = 49152
	}
	if env.MTU <= 0 {
		env.MTU = 1024
	}
	return env
}

// Result is the outcome of one scenario.
type Result struct {
	Name string `json:"name"`
	Rule string `json:"rule"`
	IBTA string `json:"ibta"`
	Pass bool   `json:"pass"`
	// Skipped says why the scenario could not run against this peer.
	Skipped string `json:"skipped,omitempty"`
	Reason  string `json:"reason,omitempty"` // why it failed: the step and what came
	Line    int    `json:"line,omitempty"`   // of the failing step
}

// Run plays one scenario. Its methods are called from one goroutine.
type Run struct {
	sc   *Scenario
	env  Env
	step int
	// The current Expect or Silence step's deadline (zero: not started).
	until time.Time
	got   bool // the current Expect matched
	res   Result
	done  bool
	out   [][]byte
	buf   []byte
	pkt   bth.Packet
	gsi   bool   // the scenario talks to QP1: the peer's MADs to ours are its answers
	tid   uint64 // of the last CM REQ sent
	// With Env.Tail: the PSNs the scenario's peer requests take, the
	// responder answering those after them, and its answers not yet
	// sent.
	span    int
	tail    responder
	pending [][]byte
}

// NewRun prepares sc to run in env.
func NewRun(sc *Scenario, env Env) *Run {
	r := &Run{sc: sc, env: env.defaults(), buf: make([]byte, 1<<14), res: Result{Name: sc.Name, Rule: sc.Rule, IBTA: sc.IBTA, Pass: true},
		gsi: sc.Needs().GSI}
	r.span = sc.span(r.env.MTU)
	r.tail = responder{env: &r.env, buf: r.buf}
	for _, st := range sc.Steps {
		if st.Kind == PeerPost {
			r.tail.msn++ // the tail's messages come after the scenario's
		}
	}
	return r
}

// Done reports whether the scenario is over.
func (r *Run) Done() bool { return r.done }

// Result returns the outcome.
func (r *Run) Result() Result { return r.res }

func (r *Run) fail(st *Step, format string, a ...any) {
	if r.res.Pass {
		r.res.Pass = false
		r.res.Line = st.Line
		r.res.Reason = fmt.Sprintf("line %d: ", st.Line) + fmt.Sprintf(format, a...)
	}
	r.done = true
}

// Poll advances to now: the frames to send, and when to be called next
// (zero when done).
func (r *Run) Poll(now time.Time) ([][]byte, time.Time) {
	r.out = append(r.out[:0], r.pending...)
	clear(r.pending)
	r.pending = r.pending[:0]
	for !r.done && r.step < len(r.sc.Steps) {
		st := &r.sc.Steps[r.step]
		switch st.Kind {
		case Send:
			f, err := r.build(&st.P)
			if err != nil {
				r.fail(st, "%v", err)
				return r.out, time.Time{}
			}
			r.out = append(r.out, f)
			r.step++
		case PeerPost:
			if r.env.PeerPost == nil {
				r.fail(st, "this peer cannot be made to post requests (it takes --self, or --serve and a stock client)")
				return r.out, time.Time{}
			}
			if err := r.env.PeerPost(&st.P); err != nil {
				r.fail(st, "the peer's post: %v", err)
				return r.out, time.Time{}
			}
			r.step++
		case Delivered:
			if r.env.PeerDelivered == nil {
				r.fail(st, "this peer does not show its receive completions (it takes --self)")
				return r.out, time.Time{}
			}
			if r.until.IsZero() {
				r.until = now.Add(r.env.Timeout)
			}
			n := r.env.PeerDelivered()
			switch {
			case n == st.N:
				r.next()
				continue
			case n > st.N:
				r.fail(st, "the peer completed %d receives, want %d", n, st.N)
				return r.out, time.Time{}
			case !now.Before(r.until):
				r.fail(st, "the peer completed %d receives within %v, want %d", n, r.env.Timeout, st.N)
				return r.out, time.Time{}
			}
			return r.out, now.Add(time.Millisecond) // the peer's engine may still be at it
		case Expect, Silence:
			if r.until.IsZero() {
				d := r.env.Timeout
				if st.Kind == Silence {
					d = st.For
				}
				r.until = now.Add(d)
			}
			if st.Kind == Expect && r.got {
				r.next()
				continue
			}
			if now.Before(r.until) {
				return r.out, r.until
			}
			if st.Kind == Expect {
				r.fail(st, "no answer within %v, expected %s", r.env.Timeout, st.P.Text)
				return r.out, time.Time{}
			}
			r.next()
		}
	}
	r.done = true
	return r.out, time.Time{}
}

func (r *Run) next() {
	r.step++
	r.until, r.got = time.Time{}, false
}

// build makes the frame of a Send step.
func (r *Run) build(p *Pkt) ([]byte, error) {
	e := &r.env
	base := e.PSN
	if !p.Op.Info().Request {
		base = e.PeerPSN // an answer to the peer's request
	}
	h := bth.Headers{L2L3: bth.L2L3{SrcMAC: e.Local.MAC, DstMAC: e.Peer.MAC, SrcIP: e.Local.IP, DstIP: e.Peer.IP, SrcPort: e.SrcPort},
		BTH: bth.BTHFields{Opcode: p.Op, PKey: e.PKey, DestQP: e.Peer.QPN, PSN: base.Add(p.PSN), AckReq: p.AckReq}}
	if p.DestQP != 0 {
		h.BTH.DestQP = p.DestQP
	}
	if p.PKey >= 0 {
		h.BTH.PKey = uint16(p.PKey)
	}
	va := e.VA + uint64(p.VA)
	if p.VA < 0 {
		va = e.VA + uint64(int64(e.Region)+p.VA)
	}
	rkey := e.RKey
	switch p.RKey {
	case "good":
	case "bad":
		rkey = e.RKey ^ 0x00a5a500
	default:
		var n uint64
		fmt.Sscan(p.RKey, &n)
		rkey = uint32(n)
	}
	info := h.Info()
	if info.Has(bth.HdrAETH) {
		h.MSN = uint32(max(p.MSN, 0))
		h.Syndrome = map[string]bth.Syndrome{"ack": bth.ACKSyndrome(bth.CreditsInvalid), "rnr": bth.RNRSyndrome(uint8(p.RNRTimer)),
			"seq": bth.NAKSyndrome(0), "inv": bth.NAKSyndrome(bth.NAKInvalidRequest), "access": bth.NAKSyndrome(bth.NAKRemoteAccessError),
			"op": bth.NAKSyndrome(bth.NAKRemoteOpError)}[p.Syndrome]
		if p.Credits >= 0 && p.Syndrome == "ack" {
			h.Syndrome = bth.ACKSyndrome(uint8(p.Credits))
		}
	}
	if info.Has(bth.HdrRETH) {
		h.VA, h.RKey, h.DMALen = va, rkey, uint32(p.Len)
		if p.DMALen >= 0 {
			h.DMALen = uint32(p.DMALen)
		}
	}
	if info.Has(bth.HdrFETH) {
		h.FETH = bth.FETHValue(p.Placement, p.Level)
	}
	if info.Has(bth.HdrAtomicETH) {
		h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare = va, rkey, p.Add, p.Compare
	}
	if info.Has(bth.HdrDETH) {
		h.SrcQP = e.Local.QPN
		if p.DestQP == stack.GSIQPN {
			h.SrcQP = stack.GSIQPN
		}
		h.QKey = e.QKey
		if p.DestQP == stack.GSIQPN {
			h.QKey = stack.GSIQKey
		}
		switch p.QKey {
		case "", "own":
		case "bad":
			h.QKey ^= 0x00a5a500 // its high bit as it was
		default:
			var n uint64
			fmt.Sscan(p.QKey, &n)
			h.QKey = uint32(n)
		}
	}
	var payload []byte
	if info.Payload {
		payload = p.Data
		if payload == nil {
			payload = bytes.Repeat([]byte{p.Fill}, p.Len)
		}
		if p.MAD == "cm_req" {
			var err error
			if payload, err = r.cmREQ(); err != nil {
				return nil, err
			}
		}
	}
	n, err := bth.Encode(r.buf, &h, payload)
	if err != nil {
		return nil, err
	}
	f := append([]byte(nil), r.buf[:n]...)
	if p.BadICRC {
		f[n-1] ^= 0xff
	}
	return f, nil
}

var syndromes = map[string]func(bth.Syndrome) bool{
	"ack":    func(s bth.Syndrome) bool { return s.Kind() == bth.AckKindACK },
	"rnr":    func(s bth.Syndrome) bool { return s.Kind() == bth.AckKindRNR },
	"seq":    func(s bth.Syndrome) bool { return s.Kind() == bth.AckKindNAK && s.Value() == 0 },
	"inv":    func(s bth.Syndrome) bool { return s.Kind() == bth.AckKindNAK && s.Value() == bth.NAKInvalidRequest },
	"access": func(s bth.Syndrome) bool { return s.Kind() == bth.AckKindNAK && s.Value() == bth.NAKRemoteAccessError },
	"op":     func(s bth.Syndrome) bool { return s.Kind() == bth.AckKindNAK && s.Value() == bth.NAKRemoteOpError },
}

// Input takes a frame received from the link; it reports whether it was
// the peer's packet to this end.
func (r *Run) Input(frame []byte, now time.Time) bool {
	p := &r.pkt
	if err := bth.Parse(frame, p); err != nil || p.Version != 2 {
		return false
	}
	if p.SrcIP() != r.env.Peer.IP || p.DstIP() != r.env.Local.IP {
		return false
	}
	if q := p.BTH().DestQP(); q != r.env.Local.QPN && (q != stack.GSIQPN || !r.gsi) {
		return false
	}
	if r.done || !p.ICRCOK() {
		return true
	}
	var h bth.Headers
	p.Headers(&h)
	if r.env.Tail && h.Info().Request && h.BTH.PSN.Sub(r.env.PeerPSN) >= r.span {
		r.pending = append(r.pending, r.tail.answer(&h)...)
		return true
	}
	got := func() string { return describe(&h, p.Payload(), r.base(&h)) }
	if r.step >= len(r.sc.Steps) {
		r.fail(&r.sc.Steps[len(r.sc.Steps)-1], "after the last step: %s", got())
		return true
	}
	st := &r.sc.Steps[r.step]
	if st.Kind == Expect && r.got {
		// Answers can come in one batch (a READ's responses): the next
		// step takes this one.
		r.next()
		if r.step >= len(r.sc.Steps) {
			r.fail(st, "after the last step: %s", got())
			return true
		}
		st = &r.sc.Steps[r.step]
	}
	for st.Kind == PeerPost && r.env.PostsAhead {
		r.next() // posted already, with the others
		if r.step >= len(r.sc.Steps) {
			r.fail(st, "after the last step: %s", got())
			return true
		}
		st = &r.sc.Steps[r.step]
	}
	switch st.Kind {
	case Silence:
		r.fail(st, "expected nothing for %v, got %s", st.For, got())
	case Send, PeerPost:
		r.fail(st, "unexpected %s before line %d was done", got(), st.Line)
	default:
		if why := r.match(&st.P, &h, p.Payload()); why != "" {
			r.fail(st, "expected %s, got %s (%s)", st.P.Text, got(), why)
		} else {
			r.got = true
		}
	}
	return true
}

// base is the first PSN of the space h's PSN is in: the peer's requests
// count from its own first PSN, its answers from ours.
func (r *Run) base(h *bth.Headers) bth.PSN {
	if h.Info().Request {
		return r.env.PeerPSN
	}
	return r.env.PSN
}

// match says how h differs from what w wants ("" when it matches).
func (r *Run) match(w *Pkt, h *bth.Headers, payload []byte) string {
	if why := match(w, h, payload, r.base(h)); why != "" {
		return why
	}
	if !h.Info().Has(bth.HdrDETH) {
		return ""
	}
	if want := uint32(w.DestQP); want == stack.GSIQPN && h.BTH.DestQP != want {
		return fmt.Sprintf("dest qp %#x", h.BTH.DestQP)
	}
	switch w.QKey {
	case "":
	case "own":
		if h.QKey != r.env.QKey {
			return fmt.Sprintf("qkey %#x, the QP's is %#x", h.QKey, r.env.QKey)
		}
	default:
		var n uint64
		fmt.Sscan(w.QKey, &n)
		if h.QKey != uint32(n) {
			return fmt.Sprintf("qkey %#x", h.QKey)
		}
	}
	if w.MAD == "cm_rej" {
		m, err := mad.Parse(payload)
		switch {
		case err != nil || !m.IsCM():
			return "not a CM MAD"
		case m.AttrID() != mad.AttrREJ:
			return fmt.Sprintf("CM %v, not a REJ", m.AttrID())
		case m.TID() != r.tid:
			return fmt.Sprintf("a REJ of transaction %#x, the REQ's is %#x", m.TID(), r.tid)
		}
	}
	return ""
}

// cmREQ builds a CM REQ MAD for a port of the peer's nobody listens on
// (as rdma_cm's, from this end's QP), each with a transaction and
// communication ID of its own.
func (r *Run) cmREQ() ([]byte, error) {
	const port = 4 // rdma_cm's port space, a port no tool uses
	e := &r.env
	req, err := rdmacm.RequestFields(netip.AddrPortFrom(e.Local.IP, 40000), netip.AddrPortFrom(e.Peer.IP, port), mad.MTU1024, nil)
	if err != nil {
		return nil, err
	}
	r.tid = uint64(e.Local.QPN)<<24 | uint64(r.step) // the live runner gives each scenario a QPN of its own
	req.LocalCommID, req.LocalQPN, req.StartingPSN = uint32(r.tid), e.Local.QPN, e.PSN
	b := make([]byte, mad.Len)
	h := mad.CMHeader(mad.AttrREQ, r.tid)
	h.Encode(b)
	req.Encode(b[mad.HeaderLen:])
	return b, nil
}

// match says how h differs from what w wants in the fields of every
// transport ("" when it matches).
func match(w *Pkt, h *bth.Headers, payload []byte, base bth.PSN) string {
	if h.BTH.Opcode != w.Op {
		return "opcode"
	}
	if rel := h.BTH.PSN.Sub(base); rel != w.PSN && !w.AnyPSN {
		return fmt.Sprintf("psn %+d", rel)
	}
	info := h.Info()
	if w.Syndrome != "" && (!info.Has(bth.HdrAETH) || !syndromes[w.Syndrome](h.Syndrome)) {
		return "syndrome " + h.Syndrome.CodeName()
	}
	if w.MSN >= 0 && int(h.MSN) != w.MSN {
		return fmt.Sprintf("msn %d", h.MSN)
	}
	if w.Credits >= 0 && int(h.Syndrome.Value()) != w.Credits {
		return fmt.Sprintf("credits %d", h.Syndrome.Value())
	}
	if w.HasLen && len(payload) != w.Len {
		return fmt.Sprintf("length %d", len(payload))
	}
	if w.Data != nil && !bytes.Equal(payload, w.Data) {
		return "payload"
	}
	if w.HasFill && !bytes.Equal(payload, bytes.Repeat([]byte{w.Fill}, len(payload))) {
		return "payload"
	}
	if w.Orig >= 0 && h.AtomicAckOrig != uint64(w.Orig) {
		return fmt.Sprintf("orig %#x", h.AtomicAckOrig)
	}
	return ""
}

func describe(h *bth.Headers, payload []byte, base bth.PSN) string {
	s := fmt.Sprintf("%s psn=%d", h.Info().Name, h.BTH.PSN.Sub(base))
	if h.Info().Has(bth.HdrAETH) {
		s += fmt.Sprintf(" %s msn=%d", h.Syndrome.CodeName(), h.MSN)
	}
	if h.Info().Has(bth.HdrAtomicAck) {
		s += fmt.Sprintf(" orig=%#x", h.AtomicAckOrig)
	}
	if len(payload) > 0 {
		s += fmt.Sprintf(" len=%d", len(payload))
		if len(payload) >= 8 {
			s += fmt.Sprintf(" data=%x…", payload[:8])
		}
	}
	return s
}
