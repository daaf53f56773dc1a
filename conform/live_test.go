package conform

import (
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// TestStockClient: each requester scenario of the catalogue names the
// perftest client that makes its request, or says why none can.
func TestStockClient(t *testing.T) {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"requester-ack-timeout":    "ib_write_bw -d rxe0 -x 1 -n 5 -t 1 -s 64 -F",
		"requester-ghost-ack":      "ib_write_bw -d rxe0 -x 1 -n 5 -t 1 -s 64 -F",
		"requester-implied-ack":    "error: the peer posts a WRITE and a READ request on one QP",
		"requester-retry-exceeded": "error: sets the peer's retry counts, which perftest fixes at 7",
		"requester-rnr-exceeded":   "error: sets the peer's retry counts, which perftest fixes at 7",
		"requester-implied-nak":    "ib_read_bw -d rxe0 -x 1 -n 5 -t 1 -s 2048 -F",
		"requester-rnr-retry":      "ib_send_bw -d rxe0 -x 1 -n 5 -t 1 -s 64 -F",
		"write-ack":                "error: the peer is the responder",
		"ud-qkey-high-bit":         "error: needs a UD QP",
	}
	checkCommands(t, all, want, func(sc *Scenario) (string, error) {
		c, err := sc.StockClient()
		return c.Command("rxe0", "1"), err
	})
}

// checkCommands checks the command line (or "error: " and the reason)
// that cmd gives for each scenario want names: an error must start with
// the text wanted, a command line be it.
func checkCommands(t *testing.T, all []*Scenario, want map[string]string, cmd func(*Scenario) (string, error)) {
	t.Helper()
	for _, sc := range all {
		w, ok := want[sc.Name]
		if !ok {
			continue
		}
		got, err := cmd(sc)
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(got, w) || err == nil && got != w {
			t.Errorf("%s: %q, want %q", sc.Name, got, w)
		}
		delete(want, sc.Name)
	}
	if len(want) > 0 {
		t.Errorf("not in the catalogue: %v", want)
	}
}

// stockRequester is a stock client's RC requester, as rdma_rxe runs
// perftest's with -t 1: one WRITE_ONLY at a time, iters of them, each
// sent again every timeout until an ACK covers it. With aheadCompletes
// it takes an ACK for a later PSN as covering its request, as rdma_rxe
// does.
type stockRequester struct {
	env            *Env
	iters, done    int
	timeout        time.Duration
	aheadCompletes bool
	sentAt         time.Time
	sent           bool
	copies         []int // how often each request went out
}

func (c *stockRequester) poll(now time.Time) [][]byte {
	if c.done == c.iters || c.sent && now.Sub(c.sentAt) < c.timeout {
		return nil
	}
	c.sent, c.sentAt = true, now
	for len(c.copies) <= c.done {
		c.copies = append(c.copies, 0)
	}
	c.copies[c.done]++
	e := c.env
	h := bth.Headers{L2L3: bth.L2L3{SrcMAC: e.Peer.MAC, DstMAC: e.Local.MAC, SrcIP: e.Peer.IP, DstIP: e.Local.IP, SrcPort: 49152},
		BTH: bth.BTHFields{Opcode: opNames["write_only"], PKey: 0xffff, DestQP: e.Local.QPN, PSN: e.PeerPSN.Add(c.done), AckReq: true},
		VA:  0x1000, RKey: 0x4242, DMALen: 64}
	buf := make([]byte, 256)
	n, err := bth.Encode(buf, &h, make([]byte, 64))
	if err != nil {
		panic(err)
	}
	return [][]byte{buf[:n]}
}

func (c *stockRequester) input(f []byte) {
	var p bth.Packet
	if err := bth.Parse(f, &p); err != nil || p.Opcode() != opNames["ack"] || c.done == c.iters {
		return
	}
	var h bth.Headers
	p.Headers(&h)
	d := h.BTH.PSN.Sub(c.env.PeerPSN.Add(c.done))
	if h.Syndrome.Kind() == bth.AckKindACK && (d == 0 || d > 0 && c.aheadCompletes) {
		c.done++
		c.sent = false
	}
}

// playStock runs scenario name of the catalogue against c on a fake
// clock.
func playStock(t *testing.T, name string, env Env, c *stockRequester) Result {
	t.Helper()
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	var sc *Scenario
	for _, s := range all {
		if s.Name == name {
			sc = s
		}
	}
	r := NewRun(sc, env)
	c.env = &r.env
	now := time.Unix(100, 0)
	for i := 0; i < 10000 && !r.Done(); i++ {
		out, wake := r.Poll(now)
		for _, f := range out {
			c.input(f)
		}
		for _, f := range c.poll(now) {
			r.Input(f, now)
		}
		next := now.Add(time.Millisecond)
		if !wake.IsZero() && wake.Before(next) {
			next = wake
		}
		now = next
	}
	if !r.Done() {
		t.Fatal("the run did not end")
	}
	return r.Result()
}

// TestRunTail: against a stock client's requester, a scenario played
// with Env.Tail answers the client's further requests and matches only
// its own; without Tail they break its silence. A requester that takes
// a later PSN's ACK as covering its request (rdma_rxe) fails the
// ghost-ACK scenario as rxe's results table says.
func TestRunTail(t *testing.T) {
	env := Env{Local: selfLocal, Peer: selfPeer, PSN: 0x10, PeerPSN: 0xfffffe, Timeout: time.Second, Tail: true,
		PeerPost: func(*Pkt) error { return nil }}
	env.Local.QPN, env.Peer.QPN = 0x101, 0x12
	c := &stockRequester{iters: 5, timeout: 67 * time.Millisecond}
	if r := playStock(t, "requester-ack-timeout", env, c); !r.Pass {
		t.Fatalf("ack timeout: %s", r.Reason)
	}
	if c.done != 5 || c.copies[0] != 2 {
		t.Errorf("the client completed %d requests, sent the first %d times", c.done, c.copies[0])
	}
	env.Tail = false
	c = &stockRequester{iters: 5, timeout: 67 * time.Millisecond}
	if r := playStock(t, "requester-ack-timeout", env, c); r.Pass || !strings.Contains(r.Reason, "expected nothing") {
		t.Errorf("without Tail: %+v", r)
	}
	env.Tail = true
	c = &stockRequester{iters: 5, timeout: 67 * time.Millisecond}
	if r := playStock(t, "requester-ghost-ack", env, c); !r.Pass {
		t.Errorf("ghost ACK ignored: %s", r.Reason)
	}
	c = &stockRequester{iters: 5, timeout: 67 * time.Millisecond, aheadCompletes: true}
	if r := playStock(t, "requester-ghost-ack", env, c); r.Pass || !strings.Contains(r.Reason, "no answer within 1s, expected write_only psn=0") {
		t.Errorf("ghost ACK taken: %+v", r)
	}
	if c.done != 5 {
		t.Errorf("the client that took the ghost ACK completed %d requests", c.done)
	}
}

// TestFinish: the finishing responder answers the peer's requests to
// its QP: a WRITE with an ACK of its PSN, a READ with its responses,
// segmented at the MTU; frames to another QP are not its.
func TestFinish(t *testing.T) {
	env := Env{Local: selfLocal, Peer: selfPeer, MTU: 1024}
	env.Local.QPN, env.Peer.QPN = 0x101, 0x12
	f := NewFinish(env)
	req := func(op string, psn bth.PSN, qpn uint32, dmalen uint32, payload int) []byte {
		h := bth.Headers{L2L3: bth.L2L3{SrcMAC: env.Peer.MAC, DstMAC: env.Local.MAC, SrcIP: env.Peer.IP, DstIP: env.Local.IP, SrcPort: 49152},
			BTH: bth.BTHFields{Opcode: opNames[op], PKey: 0xffff, DestQP: qpn, PSN: psn, AckReq: true}, RKey: 1, VA: 2, DMALen: dmalen}
		buf := make([]byte, 2048)
		n, err := bth.Encode(buf, &h, make([]byte, payload))
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	type ans struct {
		op       bth.Opcode
		psn      bth.PSN
		len, msn int
	}
	check := func(what string, want ...ans) {
		t.Helper()
		out, _ := f.Poll(time.Time{})
		if len(out) != len(want) {
			t.Fatalf("%s: %d answers, want %d", what, len(out), len(want))
		}
		for i, fr := range out {
			var p bth.Packet
			if err := bth.Parse(fr, &p); err != nil || !p.ICRCOK() {
				t.Fatalf("%s: answer %d: %v", what, i, err)
			}
			var h bth.Headers
			p.Headers(&h)
			got := ans{h.BTH.Opcode, h.BTH.PSN, len(p.Payload()), int(h.MSN)}
			if got != want[i] || h.BTH.DestQP != env.Peer.QPN || h.DstIP != env.Peer.IP {
				t.Errorf("%s: answer %d: %+v to %#x, want %+v", what, i, got, h.BTH.DestQP, want[i])
			}
		}
	}
	f.Input(req("write_only", 7, env.Local.QPN, 64, 64), time.Time{})
	check("a WRITE", ans{opNames["ack"], 7, 0, 1})
	f.Input(req("read_request", 8, env.Local.QPN, 2048, 0), time.Time{})
	check("a READ", ans{opNames["read_response_first"], 8, 1024, 2}, ans{opNames["read_response_last"], 9, 1024, 2})
	if f.Input(req("write_only", 10, 0x999, 64, 64), time.Time{}) {
		t.Error("a frame to another QP was taken")
	}
	check("a frame to another QP")
}

// TestPeerProgram: the scenarios no stock client makes get conform_peer's
// command line (every peer request, in order, with its offset or Q_Key);
// those it cannot make say why.
func TestPeerProgram(t *testing.T) {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"requester-implied-ack":    "conform_peer -d rxe0 -g 1 -t rc -k 0x4242 -a 0x7f0000001000 write:64 read:64@64",
		"ud-qkey-high-bit":         "conform_peer -d rxe0 -g 1 -t ud -k 0x4242 -a 0x7f0000001000 send:64:0x80000000 send:64:0x2222",
		"requester-implied-nak":    "conform_peer -d rxe0 -g 1 -t rc -k 0x4242 -a 0x7f0000001000 read:2048",
		"requester-retry-exceeded": "conform_peer -d rxe0 -g 1 -t rc -c 2 -k 0x4242 -a 0x7f0000001000 write:64",
		"requester-rnr-exceeded":   "conform_peer -d rxe0 -g 1 -t rc -n 1 -k 0x4242 -a 0x7f0000001000 send:64",
		"write-ack":                "error: the peer is the responder in this scenario",
		"gsi-qkey":                 "error: needs the peer's QP1 or its receive completions",
		"ud-qkey-match":            "error: needs the peer's QP1 or its receive completions",
	}
	checkCommands(t, all, want, func(sc *Scenario) (string, error) {
		p, err := sc.PeerProgram()
		return p.Command("rxe0", "1", ServeRKey, ServeVA), err
	})
	bad, err := Parse(strings.NewReader("scenario x\nrule r\nibta 1\npeer send len=64 qkey=own\nexpect ud_send_only qkey=own len=64\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad[0].PeerProgram(); err == nil || !strings.Contains(err.Error(), "numeric") {
		t.Errorf("a named Q_Key: %v", err)
	}
}

// TestPostsAhead: a peer that posted all of a scenario's requests at
// once (conform_peer) can deliver the second before the run has passed
// the peer step that posts it (both in one receive batch): with
// PostsAhead the run takes it as that request's; without, it is a
// frame before its post, and the scenario fails.
func TestPostsAhead(t *testing.T) {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	var sc *Scenario
	for _, s := range all {
		if s.Name == "ud-qkey-high-bit" {
			sc = s
		}
	}
	if sc == nil {
		t.Fatal("no ud-qkey-high-bit")
	}
	const own = PeerProgramQKey
	send := func(env Env, psn bth.PSN, qkey uint32) []byte {
		h := bth.Headers{L2L3: bth.L2L3{SrcMAC: env.Peer.MAC, DstMAC: env.Local.MAC, SrcIP: env.Peer.IP, DstIP: env.Local.IP, SrcPort: 49152},
			BTH:  bth.BTHFields{Opcode: bth.OpUDSendOnly, PKey: 0xffff, DestQP: env.Local.QPN, PSN: env.PeerPSN.Add(int(psn))},
			QKey: qkey, SrcQP: env.Peer.QPN}
		buf := make([]byte, 2048)
		n, err := bth.Encode(buf, &h, make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	for _, ahead := range []bool{true, false} {
		env := Env{Local: selfLocal, Peer: selfPeer, PeerPSN: 0x20, QKey: own, Timeout: time.Second,
			PeerPost: func(*Pkt) error { return nil }, PostsAhead: ahead}
		env.Local.QPN, env.Peer.QPN = 0x101, 0x12
		r := NewRun(sc, env)
		now := time.Unix(0, 0)
		r.Poll(now) // the first post, then waiting for its send
		r.Input(send(env, 0, own), now)
		r.Input(send(env, 1, 0x2222), now) // the same batch: no Poll between
		for i := 0; !r.Done() && i < 10; i++ {
			r.Poll(now)
		}
		res := r.Result()
		if ahead && !res.Pass {
			t.Errorf("posts ahead: %s", res.Reason)
		}
		if !ahead && (res.Pass || !strings.Contains(res.Reason, "before line")) {
			t.Errorf("without PostsAhead: %+v", res)
		}
	}
}

// TestPeerServer: conform_peer -S hosts every responder scenario but
// FLUSH's and QP1's, with the receives each needs (16 when any number
// will do, none for "receives none").
func TestPeerServer(t *testing.T) {
	all, err := Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ack-credits":           "conform_peer -S -d rxe0 -g 1 -r 4",
		"rnr":                   "conform_peer -S -d rxe0 -g 1 -r 0",
		"duplicate-write":       "conform_peer -S -d rxe0 -g 1 -r 16",
		"ud-wrong-qkey":         "conform_peer -S -d rxe0 -g 1 -t ud -r 16",
		"flush-answered":        "error: needs the flush rights",
		"gsi-qkey":              "error: talks to the peer's QP1",
		"requester-implied-ack": "error: the peer is the requester",
	}
	checkCommands(t, all, want, func(sc *Scenario) (string, error) {
		p, err := sc.PeerServer()
		return p.Command("rxe0", "1"), err
	})
}
