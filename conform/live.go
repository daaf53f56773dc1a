package conform

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uroce/uroce/bth"
)

// StockClient is the stock program whose run makes a live peer's
// requests in a scenario where the peer is the requester: a perftest
// client (ib_write_bw, ib_read_bw or ib_send_bw) of an exchange uroce
// conform serves. perftest runs at least 5 iterations; with one work
// request outstanding at a time (-t 1) the scenario's request is the
// first, and the others wait for its completion (the runner answers
// them, Env.Tail).
type StockClient struct {
	Tool string // ib_write_bw, ib_read_bw or ib_send_bw
	Len  int    // the message size (-s)
}

// StockIters is the number of messages a stock client sends (-n):
// perftest's least.
const StockIters = 5

// Command is the client's command line on device dev, GID index gid,
// without the server's address.
func (c StockClient) Command(dev, gid string) string {
	return fmt.Sprintf("%s -d %s -x %s -n %d -t 1 -s %d -F", c.Tool, dev, gid, StockIters, c.Len)
}

// StockClient returns the stock client whose requests are sc's peer
// requests, or why none is: a perftest client posts one kind of request
// of one size, one at a time here.
func (sc *Scenario) StockClient() (StockClient, error) {
	var c StockClient
	if n := sc.Needs(); n.UD || n.GSI || n.Delivered {
		return c, errors.New("needs a UD QP whose sends or receive completions show: perftest's exchange sets up an RC QP (UD scenarios: --pingpong ud)")
	}
	if sc.RetryCnt >= 0 || sc.RNRRetry >= 0 {
		return c, errors.New("sets the peer's retry counts, which perftest fixes at 7 (conform_peer sets them: --serve-peer)")
	}
	posts := 0
	for _, st := range sc.Steps {
		if st.Kind != PeerPost {
			continue
		}
		posts++
		tool := map[bth.Kind]string{bth.KindWrite: "ib_write_bw", bth.KindReadRequest: "ib_read_bw", bth.KindSend: "ib_send_bw"}[st.P.Op.Info().Kind]
		switch {
		case c.Tool != "" && c.Tool != tool:
			return c, fmt.Errorf("the peer posts a %s and a %s request on one QP, which no stock client does", verbOf(c.Tool), verbOf(tool))
		case posts > 1:
			return c, errors.New("the peer has several requests outstanding at once: the stock client runs with one (-t 1)")
		case st.P.Len <= 0:
			return c, errors.New("the peer's request needs a length (perftest's -s)")
		}
		c.Tool, c.Len = tool, st.P.Len
	}
	if posts == 0 {
		return c, errors.New("the peer is the responder in this scenario")
	}
	return c, nil
}

func verbOf(tool string) string {
	return map[string]string{"ib_write_bw": "WRITE", "ib_read_bw": "READ", "ib_send_bw": "SEND"}[tool]
}

// span is the number of PSNs the scenario's peer requests take at mtu:
// a live peer's requests past them are its stock client's further
// messages.
func (sc *Scenario) span(mtu int) int {
	n := 0
	for _, st := range sc.Steps {
		if st.Kind == PeerPost {
			n += max(1, (st.P.Len+mtu-1)/mtu)
		}
	}
	return n
}

// responder answers the peer's requests as a plain RC responder whose
// every request succeeds: an ACK for the last packet of a WRITE or SEND
// (and for any packet asking for one), READ responses with zeros, an
// atomic ACK with 0 as the original value. It keeps no state but the
// MSN: a request sent again is answered again.
type responder struct {
	env *Env
	msn uint32
	buf []byte
}

// answer returns the frames answering request h.
func (a *responder) answer(h *bth.Headers) [][]byte {
	e := a.env
	info := h.Info()
	mk := func(op bth.Opcode, psn bth.PSN, payload []byte) []byte {
		r := bth.Headers{L2L3: bth.L2L3{SrcMAC: e.Local.MAC, DstMAC: e.Peer.MAC, SrcIP: e.Local.IP, DstIP: e.Peer.IP, SrcPort: e.SrcPort},
			BTH: bth.BTHFields{Opcode: op, PKey: e.PKey, DestQP: e.Peer.QPN, PSN: psn}}
		r.Syndrome, r.MSN = bth.ACKSyndrome(bth.CreditsInvalid), a.msn
		n, err := bth.Encode(a.buf, &r, payload)
		if err != nil {
			return nil
		}
		return append([]byte(nil), a.buf[:n]...)
	}
	var out [][]byte
	switch info.Kind {
	case bth.KindWrite, bth.KindSend:
		last := info.Pos == bth.PosOnly || info.Pos == bth.PosLast
		if last {
			a.msn++
		}
		if last || h.BTH.AckReq {
			out = append(out, mk(opNames["ack"], h.BTH.PSN, nil))
		}
	case bth.KindReadRequest:
		a.msn++
		mtu := e.MTU
		n := max(1, (int(h.DMALen)+mtu-1)/mtu)
		for i := range n {
			op := opNames["read_response_middle"]
			switch {
			case n == 1:
				op = opNames["read_response_only"]
			case i == 0:
				op = opNames["read_response_first"]
			case i == n-1:
				op = opNames["read_response_last"]
			}
			l := min(mtu, int(h.DMALen)-i*mtu)
			out = append(out, mk(op, h.BTH.PSN.Add(i), make([]byte, max(l, 0))))
		}
	case bth.KindCompareSwap, bth.KindFetchAdd:
		a.msn++
		out = append(out, mk(opNames["atomic_ack"], h.BTH.PSN, nil))
	}
	return out
}

// Finish plays a plain responder to a live peer's requests once a
// scenario is over, so that the stock client making them ends its run
// (rdma_rxe's requesters retry for ever). It is a replay.Player that
// never ends by itself: the caller's context ends it.
type Finish struct {
	env Env
	r   responder
	out [][]byte
	pkt bth.Packet
}

// NewFinish answers the requests of env's peer to env's local QP.
func NewFinish(env Env) *Finish {
	env = env.defaults()
	f := &Finish{env: env}
	f.r = responder{env: &f.env, buf: make([]byte, 1<<14)}
	return f
}

// Poll returns the answers made since the last call.
func (f *Finish) Poll(time.Time) ([][]byte, time.Time) {
	out := f.out
	f.out = nil
	return out, time.Time{}
}

// Done is false: the caller ends the finish.
func (f *Finish) Done() bool { return false }

// Input answers frame when it is a request of the peer's.
func (f *Finish) Input(frame []byte, _ time.Time) bool {
	p := &f.pkt
	if err := bth.Parse(frame, p); err != nil || p.Version != 2 || !p.ICRCOK() {
		return false
	}
	if p.SrcIP() != f.env.Peer.IP || p.DstIP() != f.env.Local.IP || p.BTH().DestQP() != f.env.Local.QPN {
		return false
	}
	var h bth.Headers
	p.Headers(&h)
	if h.Info().Request {
		f.out = append(f.out, f.r.answer(&h)...)
	}
	return true
}

// The region `uroce conform --serve` advertises to a live requester (it
// plays at the frame level and has none: the requests only need to be
// recognisable).
const (
	ServeRKey   = 0x4242
	ServeVA     = 0x7f0000001000
	ServeRegion = 64 << 10
)

// PeerProgram is a run of conform_peer (conform/peer/conform_peer.c),
// the project's verbs program that makes a live peer's requests where
// no stock client can: it posts every one of a scenario's peer lines at
// once, on an RC QP (WRITE, READ, SEND) or a UD QP (SENDs, with the
// Q_Key each names), to the QP of `uroce conform --serve-peer`, whose
// QPN and PSN it learns through ibv_rc_pingpong's exchange.
type PeerProgram struct {
	UD  bool
	Ops []string // write:LEN[@OFF], read:LEN[@OFF], send:LEN[:QKEY]
	// RetryCnt and RNRRetry are its QP's retry counts (-1: 7).
	RetryCnt, RNRRetry int
}

// PeerProgramQKey is the Q_Key of conform_peer's UD QP (its own).
const PeerProgramQKey = 0x11111111

// Command is conform_peer's command line on device dev, GID index gid,
// naming the server's region rkey at va, without the server's address
// (its last argument).
func (p PeerProgram) Command(dev, gid string, rkey uint32, va uint64) string {
	tr := "rc"
	if p.UD {
		tr = "ud"
	}
	retries := ""
	if p.RetryCnt >= 0 {
		retries += fmt.Sprintf(" -c %d", p.RetryCnt)
	}
	if p.RNRRetry >= 0 {
		retries += fmt.Sprintf(" -n %d", p.RNRRetry)
	}
	return fmt.Sprintf("conform_peer -d %s -g %s -t %s%s -k %#x -a %#x %s", dev, gid, tr, retries, rkey, va, strings.Join(p.Ops, " "))
}

// PeerProgram returns the conform_peer run that makes sc's peer
// requests, or why none can.
func (sc *Scenario) PeerProgram() (PeerProgram, error) {
	var p PeerProgram
	n := sc.Needs()
	switch {
	case n.GSI || n.Delivered:
		return p, errors.New("needs the peer's QP1 or its receive completions, which conform_peer does not show")
	case !n.Peer:
		return p, errors.New("the peer is the responder in this scenario")
	}
	p.UD, p.RetryCnt, p.RNRRetry = n.UD, sc.RetryCnt, sc.RNRRetry
	for _, st := range sc.Steps {
		if st.Kind != PeerPost {
			continue
		}
		if st.P.Len < 0 || st.P.VA < 0 {
			return p, fmt.Errorf("line %d: the peer's request needs a length and an offset of 0 or more", st.Line)
		}
		var op string
		switch k := st.P.Op.Info().Kind; {
		case k == bth.KindWrite && !p.UD:
			op = fmt.Sprintf("write:%d", st.P.Len)
		case k == bth.KindReadRequest && !p.UD:
			op = fmt.Sprintf("read:%d", st.P.Len)
		case k == bth.KindSend:
			op = fmt.Sprintf("send:%d", st.P.Len)
		default:
			return p, fmt.Errorf("line %d: a UD QP posts SENDs only", st.Line)
		}
		switch {
		case st.P.VA > 0 && st.P.Op.Info().Kind != bth.KindSend:
			op += fmt.Sprintf("@%d", st.P.VA)
		case st.P.QKey != "" && p.UD:
			q, err := strconv.ParseUint(st.P.QKey, 0, 32)
			if err != nil {
				return p, fmt.Errorf("line %d: Q_Key %q: conform_peer posts numeric ones", st.Line, st.P.QKey)
			}
			op += fmt.Sprintf(":%#x", q)
		}
		p.Ops = append(p.Ops, op)
	}
	return p, nil
}

// PeerServer is a run of conform_peer as the responder (-S): an RC QP
// whose region grants remote WRITEs, READs and atomics at once, with the
// receives a scenario needs posted, or a UD QP (Q_Key PeerProgramQKey);
// it shows its receive completions. `uroce conform --conform-peer`
// connects to it.
type PeerServer struct {
	UD       bool
	Receives int
}

// Command is conform_peer's command line as the responder on device dev,
// GID index gid.
func (p PeerServer) Command(dev, gid string) string {
	s := fmt.Sprintf("conform_peer -S -d %s -g %s", dev, gid)
	if p.UD {
		s += " -t ud"
	}
	return s + fmt.Sprintf(" -r %d", p.Receives)
}

// PeerServer returns the conform_peer responder that hosts sc, or why
// none can.
func (sc *Scenario) PeerServer() (PeerServer, error) {
	var p PeerServer
	n := sc.Needs()
	switch {
	case n.Peer:
		return p, errors.New("the peer is the requester: run it with --serve-peer")
	case n.GSI:
		return p, errors.New("talks to the peer's QP1, its connection manager: run it with --perftest")
	case n.Flush:
		return p, errors.New("needs the flush rights, which the verbs headers conform_peer is built with may lack")
	}
	p.UD = n.UD
	switch {
	case sc.Receives < 0:
	case sc.Receives == 0:
		p.Receives = 16
	default:
		p.Receives = sc.Receives
	}
	return p, nil
}
