package conform

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

// TestCatalogueSelf: uroce as a responder passes every scenario its
// results table (results/uroce.txt) says it passes, and deviates where it
// says so.
func TestCatalogueSelf(t *testing.T) {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 10 {
		t.Fatalf("%d scenarios in the catalogue", len(all))
	}
	want, err := Results("uroce")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, sc := range all {
		names[sc.Name] = true
	}
	for n := range want {
		if !names[n] {
			t.Errorf("results/uroce.txt has %s, which the catalogue has not", n)
		}
	}
	for _, sc := range all {
		t.Run(sc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := RunSelf(ctx, sc, 2*time.Second, nil, SelfOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w, ok := want[sc.Name]
			switch {
			case !ok:
				t.Fatalf("no result for %s in results/uroce.txt (it got pass %v: %s)", sc.Name, r.Pass, r.Reason)
			case w.Pass && !r.Pass:
				t.Fatalf("%s: %s", sc.Rule, r.Reason)
			case !w.Pass && r.Pass:
				t.Fatalf("passes, but results/uroce.txt says it deviates: %s", w.Why)
			}
		})
	}
}

// TestCatalogueSelfKeeping: a responder that keeps the requests past a
// PSN gap (SelfOptions.KeepPastGap) deviates where results/uroce.txt's
// comment says, on gap-requests-dropped, and passes the rest.
func TestCatalogueSelfKeeping(t *testing.T) {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range all {
		t.Run(sc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := RunSelf(ctx, sc, 2*time.Second, nil, SelfOptions{KeepPastGap: true})
			if err != nil {
				t.Fatal(err)
			}
			if want := sc.Name != "gap-requests-dropped"; r.Pass != want {
				t.Errorf("pass %v, want %v: %s", r.Pass, want, r.Reason)
			}
		})
	}
}

const twoSteps = `
scenario t
rule    r
ibta    9.7
send    write_only psn=0 va=0 len=8 fill=1 ack
expect  ack psn=0 msn=1
silence 100ms
`

// crafted runs the scenario text with a fake clock; answer gives the
// peer's frames after each frame the run sent.
func crafted(t *testing.T, text string, answer func(env *Env, sent []byte) [][]byte) Result {
	t.Helper()
	scs, err := Parse(strings.NewReader(text), "t.txt")
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Local: selfLocal, Peer: selfPeer, PSN: 0xfffffe, RKey: 0x1234, VA: 0x10000, Region: 4096, Timeout: time.Second}
	env.Peer.QPN = 0x22
	r := NewRun(scs[0], env)
	now := time.Unix(100, 0)
	for i := 0; i < 1000 && !r.Done(); i++ {
		out, wake := r.Poll(now)
		for _, f := range out {
			for _, a := range answer(&r.env, f) {
				r.Input(a, now)
			}
		}
		if !wake.IsZero() {
			now = wake
		}
	}
	if !r.Done() {
		t.Fatal("the run did not end")
	}
	return r.Result()
}

// ack builds the peer's answer to a request frame.
func ack(t *testing.T, env *Env, req []byte, syn bth.Syndrome, msn uint32) []byte {
	t.Helper()
	var p bth.Packet
	if err := bth.Parse(req, &p); err != nil {
		t.Fatal(err)
	}
	h := bth.Headers{L2L3: bth.L2L3{SrcMAC: env.Peer.MAC, DstMAC: env.Local.MAC, SrcIP: env.Peer.IP, DstIP: env.Local.IP, SrcPort: 49152},
		BTH: bth.BTHFields{Opcode: 0x11, PKey: 0xffff, DestQP: env.Local.QPN, PSN: p.BTH().PSN()}, Syndrome: syn, MSN: msn}
	buf := make([]byte, 256)
	n, err := bth.Encode(buf, &h, nil)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestRunCrafted: the scenario engine passes a peer that answers as the
// scenario says and fails one that answers wrongly, late, not at all or
// during a silence, naming the line and what came.
func TestRunCrafted(t *testing.T) {
	// The request sent is as written: opcode, PSN from the base (wrapping),
	// RETH at the region's offset with its key, the payload.
	var sent []byte
	if r := crafted(t, twoSteps, func(env *Env, f []byte) [][]byte {
		sent = f
		return [][]byte{ack(t, env, f, bth.ACKSyndrome(31), 1)}
	}); !r.Pass {
		t.Fatalf("a right answer fails: %s", r.Reason)
	}
	var p bth.Packet
	if err := bth.Parse(sent, &p); err != nil || !p.ICRCOK() {
		t.Fatalf("sent frame: %v", err)
	}
	if p.Opcode() != 0x0a || p.BTH().PSN() != 0xfffffe || p.RETH().VA() != 0x10000 || p.RETH().RKey() != 0x1234 ||
		p.RETH().DMALen() != 8 || !bytes.Equal(p.Payload(), bytes.Repeat([]byte{1}, 8)) || !p.BTH().AckReq() || p.BTH().DestQP() != 0x22 {
		t.Fatalf("sent %x", sent)
	}
	for _, c := range []struct {
		name   string
		answer func(env *Env, f []byte) [][]byte
		reason string
	}{
		{"a NAK", func(env *Env, f []byte) [][]byte {
			return [][]byte{ack(t, env, f, bth.NAKSyndrome(bth.NAKInvalidRequest), 0)}
		},
			"line 6: expected ack psn=0 msn=1, got RC_ACKNOWLEDGE psn=0 invalid_request msn=0 (syndrome invalid_request)"},
		{"a wrong MSN", func(env *Env, f []byte) [][]byte { return [][]byte{ack(t, env, f, bth.ACKSyndrome(31), 2)} },
			"(msn 2)"},
		{"no answer", func(*Env, []byte) [][]byte { return nil }, "line 6: no answer within 1s"},
		{"an answer twice", func(env *Env, f []byte) [][]byte {
			a := ack(t, env, f, bth.ACKSyndrome(31), 1)
			return [][]byte{a, a}
		}, "line 7: expected nothing for 100ms"},
	} {
		r := crafted(t, twoSteps, c.answer)
		if r.Pass || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: pass %v, reason %q, want %q", c.name, r.Pass, r.Reason, c.reason)
		}
	}
	// An answer with a bad ICRC is not an answer.
	r := crafted(t, twoSteps, func(env *Env, f []byte) [][]byte {
		a := ack(t, env, f, bth.ACKSyndrome(31), 1)
		a[len(a)-1] ^= 1
		return [][]byte{a}
	})
	if r.Pass || !strings.Contains(r.Reason, "no answer") {
		t.Errorf("bad icrc answer: %+v", r)
	}
}

// TestParseErrors: what is not the format is refused with its line.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"send write_only", "t.txt:1: send before the first scenario line"},
		{"scenario a\nrule r\nsend write_sideways", `t.txt:3: unknown opcode "write_sideways"`},
		{"scenario a\nrule r\nsend write_only psn=x", "t.txt:3: psn="},
		{"scenario a\nrule r\nsend write_only psn=any", "t.txt:3: psn="}, // only an expected PSN may be any
		{"scenario a\nrule r\nexpect ack syndrome=meh", "t.txt:3: syndrome="},
		{"scenario a\nrule r\nsilence soon", "t.txt:3: silence"},
		{"scenario a\nrule r\nfrobnicate", "t.txt:3: unknown keyword"},
		{"scenario a\nsend write_only", "t.txt:1: scenario a needs a rule"},
		{"scenario a\nrule r\nreceives -2\nsend send_only", "t.txt:3: receives"},
		{"scenario a\nrule r\nsend ud_send_only qp=2", "t.txt:3: qp="},
		{"scenario a\nrule r\nsend ud_send_only mad=cm_rej", "t.txt:3: mad="},
		{"scenario a\nrule r\nsend ud_send_only qkey=some", "t.txt:3: qkey="},
		{"scenario a\nrule r\ndelivered many", "t.txt:3: delivered"},
		{"scenario a\nrule r\nretry 8", "t.txt:3: retry"},
		{"scenario a\nrule r\nrnr_retry -1", "t.txt:3: rnr_retry"},
	} {
		_, err := Parse(strings.NewReader(c.text), "t.txt")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(twoSteps)
	f.Add("scenario x\nrule y\nsend fetch_add psn=1 va=-8 add=3 compare=0x10 rkey=bad icrc=bad pkey=0x7fff\nexpect atomic_ack orig=0 data=00ff")
	f.Fuzz(func(t *testing.T, s string) {
		scs, err := Parse(strings.NewReader(s), "f")
		if err != nil {
			return
		}
		for _, sc := range scs {
			r := NewRun(sc, Env{Local: selfLocal, Peer: selfPeer, Region: 4096, Timeout: time.Millisecond})
			now := time.Unix(0, 0)
			for i := 0; i < 100 && !r.Done(); i++ {
				_, wake := r.Poll(now)
				if !wake.IsZero() {
					now = wake
				}
			}
		}
	})
}

// TestRunPeerPost: a peer step makes the peer post; the peer's requests
// are matched from its own first PSN, and the answers sent to them carry
// PSNs of that space.
func TestRunPeerPost(t *testing.T) {
	scs, err := Parse(strings.NewReader("scenario p\nrule r\npeer write len=8\nexpect write_only psn=0 len=8\nsend ack psn=0 msn=1\n"), "p.txt")
	if err != nil {
		t.Fatal(err)
	}
	posts := 0
	env := Env{Local: selfLocal, Peer: selfPeer, PSN: 0x10, PeerPSN: 0xfffff0, Timeout: time.Second,
		PeerPost: func(p *Pkt) error {
			if p.Len != 8 || p.Op.Info().Kind != bth.KindWrite {
				t.Errorf("peer post %+v", p)
			}
			posts++
			return nil
		}}
	env.Peer.QPN = 0x22
	request := func(psn bth.PSN) []byte {
		h := bth.Headers{L2L3: bth.L2L3{SrcMAC: env.Peer.MAC, DstMAC: env.Local.MAC, SrcIP: env.Peer.IP, DstIP: env.Local.IP, SrcPort: 1},
			BTH: bth.BTHFields{Opcode: 0x0a, PKey: 0xffff, DestQP: env.Local.QPN, PSN: psn, AckReq: true}, VA: 1, RKey: 2, DMALen: 8}
		buf := make([]byte, 256)
		n, err := bth.Encode(buf, &h, make([]byte, 8))
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	now := time.Unix(1, 0)
	r := NewRun(scs[0], env)
	if out, _ := r.Poll(now); len(out) != 0 || posts != 1 {
		t.Fatalf("%d frames, %d posts", len(out), posts)
	}
	r.Input(request(0xfffff0), now)
	out, _ := r.Poll(now)
	if len(out) != 1 || !r.Done() || !r.Result().Pass {
		t.Fatalf("%d frames, result %+v", len(out), r.Result())
	}
	var p bth.Packet
	if err := bth.Parse(out[0], &p); err != nil || p.Opcode() != 0x11 || p.BTH().PSN() != 0xfffff0 || p.AETH().MSN() != 1 ||
		p.AETH().Syndrome().Kind() != bth.AckKindACK || p.BTH().DestQP() != 0x22 {
		t.Fatalf("ack %x: %v", out[0], err)
	}
	// The request at a PSN of the wrong space fails the step.
	r = NewRun(scs[0], env)
	r.Poll(now)
	r.Input(request(0x10), now)
	if r.Result().Pass || !strings.Contains(r.Result().Reason, "line 4") {
		t.Fatalf("a request at the wrong PSN: %+v", r.Result())
	}
}

// TestRunUD: UD SENDs are built with the Q_Key asked for (the QP's, a
// bad one with the high bit kept, the GSI's to QP1 with a CM REQ from
// this end's QP); delivered steps wait for the peer's completions and
// fail on too few or too many; a REJ must answer the REQ's transaction.
func TestRunUD(t *testing.T) {
	const text = `scenario u
rule r
send ud_send_only len=8 fill=1
send ud_send_only qkey=bad len=8
delivered 1
send ud_send_only qp=1 mad=cm_req
expect ud_send_only qp=1 psn=any qkey=0x80010000 mad=cm_rej
`
	scs, err := Parse(strings.NewReader(text), "u.txt")
	if err != nil {
		t.Fatal(err)
	}
	if n := scs[0].Needs(); !n.UD || !n.GSI || !n.Delivered {
		t.Fatalf("needs %+v", n)
	}
	run := func(delivered int, rejTID func(req uint64) uint64) (Result, []*bth.Packet) {
		env := Env{Local: selfLocal, Peer: selfPeer, PSN: 0x10, QKey: 0x11111111, Timeout: 50 * time.Millisecond,
			PeerDelivered: func() int { return delivered }}
		env.Peer.QPN = 0x22
		r := NewRun(scs[0], env)
		var sent []*bth.Packet
		now := time.Unix(1, 0)
		for i := 0; i < 1000 && !r.Done(); i++ {
			out, wake := r.Poll(now)
			for _, f := range out {
				p := new(bth.Packet)
				if err := bth.Parse(append([]byte(nil), f...), p); err != nil || !p.ICRCOK() {
					t.Fatalf("sent %x: %v", f, err)
				}
				sent = append(sent, p)
				if p.BTH().DestQP() != 1 {
					continue
				}
				m, err := mad.Parse(p.Payload())
				if err != nil || m.AttrID() != mad.AttrREQ || mad.REQ(m.Data()).LocalQPN() != selfLocal.QPN {
					t.Fatalf("the REQ sent: %v", err)
				}
				b := make([]byte, mad.Len)
				h := mad.CMHeader(mad.AttrREJ, rejTID(m.TID()))
				h.Encode(b)
				rej := mad.REJFields{RemoteCommID: mad.REQ(m.Data()).LocalCommID(), Reason: mad.RejInvalidServiceID}
				rej.Encode(b[mad.HeaderLen:])
				a := bth.Headers{L2L3: bth.L2L3{SrcMAC: env.Peer.MAC, DstMAC: env.Local.MAC, SrcIP: env.Peer.IP, DstIP: env.Local.IP, SrcPort: 1},
					BTH: bth.BTHFields{Opcode: bth.OpUDSendOnly, PKey: 0xffff, DestQP: 1, PSN: 7}, QKey: 0x80010000, SrcQP: 1}
				buf := make([]byte, 512)
				n, err := bth.Encode(buf, &a, b)
				if err != nil {
					t.Fatal(err)
				}
				r.Input(buf[:n], now)
			}
			if !wake.IsZero() {
				now = wake
			}
		}
		return r.Result(), sent
	}
	same := func(tid uint64) uint64 { return tid }
	res, sent := run(1, same)
	if !res.Pass || len(sent) != 3 {
		t.Fatalf("%+v, %d sent", res, len(sent))
	}
	for i, want := range []struct{ qp, qkey, src uint32 }{{0x22, 0x11111111, selfLocal.QPN}, {0x22, 0x11b4b411, selfLocal.QPN}, {1, 0x80010000, 1}} {
		p := sent[i]
		if p.BTH().DestQP() != want.qp || p.DETH().QKey() != want.qkey || p.DETH().SrcQP() != want.src {
			t.Errorf("UD SEND %d: qp %#x qkey %#x src %#x, want %+v", i, p.BTH().DestQP(), p.DETH().QKey(), p.DETH().SrcQP(), want)
		}
	}
	for _, c := range []struct {
		delivered int
		tid       func(uint64) uint64
		reason    string
	}{
		{0, same, "line 5: the peer completed 0 receives within 50ms, want 1"},
		{2, same, "line 5: the peer completed 2 receives, want 1"},
		{1, func(tid uint64) uint64 { return tid + 1 }, "line 7: expected ud_send_only qp=1 psn=any qkey=0x80010000 mad=cm_rej"},
	} {
		if res, _ := run(c.delivered, c.tid); res.Pass || !strings.Contains(res.Reason, c.reason) {
			t.Errorf("delivered %d: %+v, want %q", c.delivered, res, c.reason)
		}
	}
}

// TestParseResults: every checked-in table parses (each scenario listed
// once); a name listed twice, or a line of another form, is refused.
func TestParseResults(t *testing.T) {
	for _, peer := range []string{"uroce", "rxe-6.1", "rxe-6.12"} {
		if _, err := Results(peer); err != nil {
			t.Errorf("%s: %v", peer, err)
		}
	}
	for _, bad := range []string{"a pass\na pass\n", "a passes\n", "a deviates\n"} {
		if _, err := ParseResults(strings.NewReader(bad)); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
	m, err := ParseResults(strings.NewReader("# a table\na pass\nb deviates it does not\n"))
	if err != nil || !m["a"].Pass || m["b"].Pass || m["b"].Why != "it does not" {
		t.Errorf("%v %v", m, err)
	}
}

// wrongPeer is the self peer's link as a peer that answers wrongly: every
// RoCE frame it sends arrives with its PSN 7 further on and its AETH's
// MSN one more, a MAD to QP1 with another attribute, the ICRC made good
// again.
type wrongPeer struct {
	stack.Link
	pkt bth.Packet
	buf []byte
}

func (w *wrongPeer) Receive(frames [][]byte) int {
	n := w.Link.Receive(frames)
	for i, f := range frames[:n] {
		if bth.Parse(f, &w.pkt) != nil {
			continue
		}
		var h bth.Headers
		w.pkt.Headers(&h)
		payload := append([]byte(nil), w.pkt.Payload()...)
		if w.pkt.BTH().DestQP() == 1 && len(payload) > 17 {
			payload[17] ^= 0x0f // the MAD's attribute ID
		} else {
			h.BTH.PSN = h.BTH.PSN.Add(7)
			h.MSN++
		}
		if len(w.buf) < len(f)+64 {
			w.buf = make([]byte, 2*len(f)+64)
		}
		k, err := bth.Encode(w.buf[len(w.buf)/2:], &h, payload)
		if err != nil {
			continue
		}
		frames[i] = append(w.buf[:0:len(w.buf)/2], w.buf[len(w.buf)/2:len(w.buf)/2+k]...)
	}
	return n
}

// qkeyBlind makes the self peer's Q_Key check say the opposite: the UD
// SENDs the run transmits reach it with the Q_Key changed, SelfQKey for
// any other and another for SelfQKey, so it takes what it should drop
// and drops what it should take.
type qkeyBlind struct {
	stack.Link
	pkt bth.Packet
	out [][]byte
}

func (q *qkeyBlind) Transmit(frames [][]byte) int {
	q.out = q.out[:0]
	for _, f := range frames {
		if bth.Parse(f, &q.pkt) == nil && q.pkt.Info.Has(bth.HdrDETH) && q.pkt.BTH().DestQP() != 1 {
			var h bth.Headers
			q.pkt.Headers(&h)
			if h.QKey == SelfQKey {
				h.QKey = SelfQKey ^ 1
			} else {
				h.QKey = SelfQKey
			}
			buf := make([]byte, len(f)+64)
			if n, err := bth.Encode(buf, &h, q.pkt.Payload()); err == nil {
				f = buf[:n]
			}
		}
		q.out = append(q.out, f)
	}
	return q.Link.Transmit(q.out)
}

// TestCatalogueDeliveriesWrongPeer: the scenarios that only count the
// peer's deliveries fail against a peer whose Q_Key check is reversed.
func TestCatalogueDeliveriesWrongPeer(t *testing.T) {
	ran := againstWrongPeer(t, func(expects, counts bool) bool { return !expects && counts },
		func(l stack.Link) stack.Link { return &qkeyBlind{Link: l} })
	if ran < 2 {
		t.Errorf("%d scenarios count deliveries only", ran)
	}
}

// TestCatalogueWrongPeer runs every scenario that expects answers on the
// wire against the self peer made to answer wrongly (wrongPeer): each
// must fail. A scenario that only counts the peer's deliveries (UD, no
// answers) cannot see it and is left out: TestCatalogueDeliveriesWrongPeer
// has those.
func TestCatalogueWrongPeer(t *testing.T) {
	ran := againstWrongPeer(t, func(expects, _ bool) bool { return expects },
		func(l stack.Link) stack.Link { return &wrongPeer{Link: l} })
	if ran < 25 {
		t.Errorf("%d scenarios expect answers", ran)
	}
}

// againstWrongPeer runs, a subtest each, the catalogue's scenarios that
// pick chooses (by whether they expect answers and count deliveries)
// against the self peer with the run's side of its link wrapped by wrap,
// a peer that breaks rules: each must fail. It returns how many ran.
func againstWrongPeer(t *testing.T, pick func(expects, counts bool) bool, wrap func(stack.Link) stack.Link) int {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, sc := range all {
		expects, counts := false, false
		for _, st := range sc.Steps {
			expects = expects || st.Kind == Expect
			counts = counts || st.Kind == Delivered
		}
		if !pick(expects, counts) {
			continue
		}
		ran++
		t.Run(sc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := runSelf(ctx, sc, 300*time.Millisecond, nil, wrap, SelfOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass {
				t.Errorf("passes against a peer that breaks its rules: %s", sc.Rule)
			}
		})
	}
	return ran
}
