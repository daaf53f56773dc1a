// Package conform runs scripted transport scenarios against a live RoCE
// peer, each checking one IBTA rule: the library behind `uroce
// conform`.
//
// A scenario is data: a few lines of text (see Parse) that send crafted
// packets to the peer's QP and say what must come back, or that nothing
// must. Run plays one scenario sans-I/O, as replay.Session plays a
// capture: the caller moves frames between it and a link and gives it
// the time. The catalogue shipped with uroce is in catalogue/; users add
// their own files in the same format.
package conform

import (
	"bufio"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/uroce/uroce/bth"
)

// Scenario is one rule checked against a peer in the responder role.
type Scenario struct {
	Name string
	Rule string // what the peer must do
	IBTA string // where the IBTA says so
	File string
	Line int
	// Receives is how many receives the peer needs posted (-1: none;
	// 0: any number).
	Receives int
	// RetryCnt and RNRRetry are the peer QP's retry counts when it is
	// the requester (-1: the peer's own, 7 for the self peer): the
	// scenario sees it give up after them.
	RetryCnt, RNRRetry int
	Steps              []Step
}

// StepKind is what a step does.
type StepKind int

const (
	// Send sends a packet.
	Send StepKind = iota
	// Expect waits for a packet from the peer that matches.
	Expect
	// Silence checks that nothing comes from the peer for a while.
	Silence
	// PeerPost makes the peer post a work request (the peer as
	// requester; only peers the tool drives itself, as --self).
	PeerPost
	// Delivered checks how many receives the peer has completed (only
	// peers that show their completions, as --self).
	Delivered
)

// Step is one line of a scenario.
type Step struct {
	Kind StepKind
	Line int
	P    Pkt
	For  time.Duration // Silence
	N    int           // Delivered
}

// Pkt is a packet to send, or the fields an expected one must have. The
// PSN is relative to the first PSN the peer expects; VAs are offsets in
// the peer's region (negative: from its end).
type Pkt struct {
	Op       bth.Opcode
	Text     string // the line's fields, for messages
	PSN      int
	AnyPSN   bool // expected: psn=any, whatever the PSN
	VA       int64
	Len      int
	DMALen   int // RETH length when it differs from Len (-1: as Len)
	Fill     byte
	Data     []byte // payload bytes (instead of Fill)
	RKey     string // "good" (default), "bad" or a number
	AckReq   bool
	BadICRC  bool
	PKey     int // -1: the peer's
	Add      uint64
	Compare  uint64
	Syndrome string // expected: ack, rnr, seq, inv, access, op
	MSN      int    // expected; -1: any
	Credits  int    // expected ACK credit code (AETH low 5 bits); -1: any
	RNRTimer int    // the timer code of an RNR NAK sent
	Orig     int64  // expected atomic original value; -1: any
	HasFill  bool
	HasLen   bool

	// FLUSH: the FETH's placement type (1 global visibility, 2
	// persistence) and selectivity level (0 the RETH's range, 1 the
	// whole region).
	Placement, Level uint8

	// UD: the DETH's Q_Key ("" the peer QP's, "bad" another, "own" the
	// peer QP's where it is expected, or a number), the destination QP
	// (1: the GSI QP; 0: the peer's QP) and a MAD as payload (send:
	// "cm_req", a CM REQ for a port nobody listens on; expect:
	// "cm_rej", a CM REJ).
	QKey   string
	DestQP uint32
	MAD    string
}

// opNames maps the names scenarios use to RC opcodes.
var opNames = func() map[string]bth.Opcode {
	m := map[string]bth.Opcode{}
	for o := 0; o < 32; o++ {
		info := bth.Opcode(o).Info()
		if !info.Valid {
			continue
		}
		n := strings.ToLower(strings.TrimPrefix(info.Name, "RC_"))
		n = strings.ReplaceAll(n, "rdma_", "")
		n = strings.ReplaceAll(n, "acknowledge", "ack")
		m[n] = bth.Opcode(o)
	}
	for _, o := range []bth.Opcode{bth.OpUDSendOnly, bth.OpUDSendOnlyImm} {
		m[strings.ToLower(o.Info().Name)] = o
	}
	return m
}()

// Parse reads scenarios in the text format:
//
//	# a comment
//	scenario duplicate-write
//	rule     a duplicate WRITE is acknowledged again, not executed again
//	ibta     9.7 (duplicate requests)
//	send     write_only psn=0 va=0 len=64 fill=0xaa ack
//	expect   ack psn=0 syndrome=ack msn=1
//	silence  200ms
//
// Opcodes are the RC ones by name (send_only, write_first, read_request,
// fetch_add, compare_swap, ack, atomic_ack, read_response_only, …).
// Fields of send: psn, va (an offset in the peer's region; negative
// counts from its end), len, dmalen, fill (the payload's byte), data
// (the payload in hex), rkey (good, bad or a number), ack (the A bit),
// icrc=bad, pkey, add and compare (atomics), placement and level
// (FLUSH: the FETH; len is then the RETH's length). Fields of expect: psn (or
// psn=any, where implementations differ), syndrome (ack, rnr, seq, inv, access, op), msn, len, fill, data, orig
// (the atomic's original value). "receives N" (or "receives none") says
// what the peer must have posted, "delivered N" how many receives it
// must have completed by then; "retry N" and "rnr_retry N" set the peer
// QP's retry counts where it is the requester. UD: ud_send_only and
// ud_send_only_with_immediate, with qkey (bad, own — expected: the peer
// QP's — or a number), qp=1 (the GSI QP) and mad (cm_req sent, cm_rej
// expected).
func Parse(r io.Reader, file string) ([]*Scenario, error) {
	var out []*Scenario
	var cur *Scenario
	sc := bufio.NewScanner(r)
	line := 0
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s:%d: "+format, append([]any{file, line}, a...)...)
	}
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		key, rest := f[0], strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), f[0]))
		if key == "scenario" {
			if len(f) != 2 {
				return nil, bad("scenario takes one name")
			}
			cur = &Scenario{Name: f[1], File: file, Line: line, RetryCnt: -1, RNRRetry: -1}
			out = append(out, cur)
			continue
		}
		if cur == nil {
			return nil, bad("%s before the first scenario line", key)
		}
		switch key {
		case "rule":
			cur.Rule = rest
		case "ibta":
			cur.IBTA = rest
		case "retry", "rnr_retry":
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 || n > 7 {
				return nil, bad("%s %q: a count from 0 to 7", key, rest)
			}
			if key == "retry" {
				cur.RetryCnt = n
			} else {
				cur.RNRRetry = n
			}
		case "receives":
			if rest == "none" {
				cur.Receives = -1
			} else if n, err := strconv.Atoi(rest); err == nil && n > 0 {
				cur.Receives = n
			} else {
				return nil, bad("receives %q: a number or none", rest)
			}
		case "peer":
			if len(f) < 2 {
				return nil, bad("peer needs an operation: write, read or send")
			}
			var op bth.Opcode
			switch f[1] {
			case "write":
				op = opNames["write_only"]
			case "read":
				op = opNames["read_request"]
			case "send":
				op = opNames["send_only"]
			default:
				return nil, bad("peer %q: write, read or send", f[1])
			}
			p, err := parsePkt("write_only", f[2:], true)
			if err != nil {
				return nil, bad("%v", err)
			}
			p.Op, p.Text = op, strings.Join(f[1:], " ")
			cur.Steps = append(cur.Steps, Step{Kind: PeerPost, Line: line, P: p})
		case "delivered":
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 {
				return nil, bad("delivered %q: a number of receive completions", rest)
			}
			cur.Steps = append(cur.Steps, Step{Kind: Delivered, Line: line, N: n})
		case "silence":
			d, err := time.ParseDuration(rest)
			if err != nil || d <= 0 {
				return nil, bad("silence %q: a duration such as 200ms", rest)
			}
			cur.Steps = append(cur.Steps, Step{Kind: Silence, Line: line, For: d})
		case "send", "expect":
			if len(f) < 2 {
				return nil, bad("%s needs an opcode", key)
			}
			p, err := parsePkt(f[1], f[2:], key == "send")
			if err != nil {
				return nil, bad("%v", err)
			}
			p.Text = strings.Join(f[1:], " ")
			k := Send
			if key == "expect" {
				k = Expect
			}
			cur.Steps = append(cur.Steps, Step{Kind: k, Line: line, P: p})
		default:
			return nil, bad("unknown keyword %q (scenario, rule, ibta, receives, retry, rnr_retry, send, expect, silence, peer, delivered)", key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, s := range out {
		if s.Rule == "" || len(s.Steps) == 0 {
			return nil, fmt.Errorf("%s:%d: scenario %s needs a rule and steps", file, s.Line, s.Name)
		}
	}
	return out, nil
}

func parsePkt(op string, fields []string, send bool) (Pkt, error) {
	p := Pkt{DMALen: -1, RKey: "good", PKey: -1, MSN: -1, Orig: -1, Credits: -1}
	o, ok := opNames[op]
	if !ok {
		return p, fmt.Errorf("unknown opcode %q", op)
	}
	p.Op = o
	for _, f := range fields {
		k, v, hasV := strings.Cut(f, "=")
		num := func() (int64, error) {
			n, err := strconv.ParseInt(v, 0, 64)
			if err != nil || !hasV {
				return 0, fmt.Errorf("%s=%q: want a number", k, v)
			}
			return n, nil
		}
		var n int64
		var err error
		switch k {
		case "ack":
			p.AckReq = true
		case "icrc":
			p.BadICRC = v == "bad"
			if !p.BadICRC {
				return p, fmt.Errorf("icrc=%q: only icrc=bad", v)
			}
		case "rkey":
			p.RKey = v
			if v != "good" && v != "bad" {
				_, err = num()
			}
		case "qkey":
			p.QKey = v
			if v != "bad" && v != "own" {
				_, err = num()
			}
		case "qp":
			if v != "1" {
				return p, fmt.Errorf("qp=%q: only qp=1 (the GSI QP)", v)
			}
			p.DestQP = 1
		case "mad":
			if (send && v != "cm_req") || (!send && v != "cm_rej") {
				return p, fmt.Errorf("mad=%q: cm_req (sent) or cm_rej (expected)", v)
			}
			p.MAD = v
		case "syndrome":
			switch v {
			case "ack", "rnr", "seq", "inv", "access", "op":
				p.Syndrome = v
			default:
				return p, fmt.Errorf("syndrome=%q: ack, rnr, seq, inv, access or op", v)
			}
		case "data":
			p.Data, err = hex.DecodeString(v)
			p.HasLen, p.Len = true, len(p.Data)
		case "psn":
			if v == "any" && !send {
				p.AnyPSN = true
				break
			}
			if n, err = num(); err == nil {
				p.PSN = int(n)
			}
		case "va", "len", "dmalen", "fill", "pkey", "add", "compare", "msn", "orig", "credits", "rnrtimer", "placement", "level":
			if n, err = num(); err != nil {
				break
			}
			switch k {
			case "va":
				p.VA = n
			case "len":
				p.Len, p.HasLen = int(n), true
			case "dmalen":
				p.DMALen = int(n)
			case "fill":
				p.Fill, p.HasFill = byte(n), true
			case "pkey":
				p.PKey = int(n & 0xffff)
			case "add":
				p.Add = uint64(n)
			case "compare":
				p.Compare = uint64(n)
			case "msn":
				p.MSN = int(n)
			case "orig":
				p.Orig = n
			case "credits":
				p.Credits = int(n & 0x1f)
			case "rnrtimer":
				p.RNRTimer = int(n & 0x1f)
			case "placement":
				p.Placement = uint8(n & 0x0f)
			case "level":
				p.Level = uint8(n & 3)
			}
		default:
			return p, fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return p, err
		}
	}
	if p.Syndrome == "" && p.Op.Info().Has(bth.HdrAETH) {
		p.Syndrome = "ack"
	}
	return p, nil
}

//go:embed catalogue/*.txt
var catalogue embed.FS

// Catalogue returns the scenarios shipped with uroce.
func Catalogue() ([]*Scenario, error) {
	ents, err := catalogue.ReadDir("catalogue")
	if err != nil {
		return nil, err
	}
	var all []*Scenario
	for _, e := range ents {
		f, err := catalogue.Open("catalogue/" + e.Name())
		if err != nil {
			return nil, err
		}
		s, err := Parse(f, "catalogue/"+e.Name())
		f.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	return all, nil
}

// Expected is a peer's recorded outcome of one scenario: pass, or a
// deviation and why.
type Expected struct {
	Pass bool
	Why  string
}

// ParseResults reads a results table: one line per scenario, its name,
// "pass" or "deviates" and the reason.
func ParseResults(r io.Reader) (map[string]Expected, error) {
	m := map[string]Expected{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i == 0 {
			continue
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if _, dup := m[f[0]]; dup {
			return nil, fmt.Errorf("line %d: %s listed twice", line, f[0])
		}
		switch {
		case len(f) == 2 && f[1] == "pass":
			m[f[0]] = Expected{Pass: true}
		case len(f) > 2 && f[1] == "deviates":
			m[f[0]] = Expected{Why: strings.Join(f[2:], " ")}
		default:
			return nil, fmt.Errorf("line %d: want NAME pass, or NAME deviates REASON", line)
		}
	}
	return m, sc.Err()
}

//go:embed results/*.txt
var results embed.FS

// Results returns the checked-in results table of a peer (uroce,
// rxe-6.1, …).
func Results(peer string) (map[string]Expected, error) {
	f, err := results.Open("results/" + peer + ".txt")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseResults(f)
}

// Needs is what a scenario's requests need of the peer's QP: the remote
// accesses they use (an ATOMIC_WRITE needs write access, a FLUSH the
// flush rights), whether they are SENDs, whether the peer must be made
// to post requests of its own, and whether it must know the IBA 1.5
// memory placement operations (FLUSH, ATOMIC_WRITE: rdma_rxe from Linux
// 6.2 on).
//
// UD says its requests are UD SENDs to the peer's QP (a UD QP), GSI that
// it talks to the peer's QP1 (its connection manager), Delivered that it
// checks the peer's receive completions.
type Needs struct{ Write, Read, Atomic, Flush, Send, Peer, Placement, UD, GSI, Delivered bool }

// Needs returns what sc's requests need.
func (sc *Scenario) Needs() Needs {
	var n Needs
	for _, st := range sc.Steps {
		if st.Kind == PeerPost {
			n.Peer = true
		}
		if st.Kind == Delivered {
			n.Delivered = true
		}
		if st.P.Op.Info().Transport == bth.TransportUD {
			if st.P.DestQP == 1 {
				n.GSI = true
			} else {
				n.UD = true
			}
		}
		if st.Kind != Send {
			continue
		}
		switch st.P.Op.Info().Kind {
		case bth.KindWrite:
			n.Write = true
		case bth.KindAtomicWrite:
			n.Write, n.Placement = true, true
		case bth.KindFlush:
			n.Flush, n.Placement = true, true
		case bth.KindReadRequest:
			n.Read = true
		case bth.KindCompareSwap, bth.KindFetchAdd:
			n.Atomic = true
		case bth.KindSend:
			n.Send = true
		}
	}
	return n
}
