package replay

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

func load(t *testing.T, path string) []*Conversation {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("%s not present", path)
		}
		t.Fatal(err)
	}
	defer f.Close()
	c, _, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// crafted drives a session by hand, with a fake clock: after each
// packet the session sends, answer gives the peer's frames.
type crafted struct {
	t   *testing.T
	s   *Session
	now time.Time
}

func (c *crafted) encode(p *Packet) []byte {
	buf := make([]byte, 1<<14)
	n, err := bth.Encode(buf, &p.H, p.Payload)
	if err != nil {
		c.t.Fatal(err)
	}
	return buf[:n]
}

// run plays the session; answer(k) returns the frames the peer sends
// after the session's k-th packet (from 1).
func (c *crafted) run(answer func(k int) [][]byte) (*Report, [][]byte) {
	var sent [][]byte
	for i := 0; i < 10000 && !c.s.Done(); i++ {
		out, wake := c.s.Poll(c.now)
		if len(out) == 0 {
			if wake.IsZero() {
				break
			}
			c.now = wake
			continue
		}
		for _, f := range out {
			sent = append(sent, append([]byte(nil), f...))
			for _, a := range answer(len(sent)) {
				if !c.s.Input(a, c.now) {
					c.t.Fatalf("answer %x not taken", a[:16])
				}
			}
		}
		c.now = c.now.Add(time.Microsecond)
	}
	if !c.s.Done() {
		c.t.Fatal("the session did not end")
	}
	return c.s.Report(), sent
}

// recorded answers as the recording has them: after our k-th packet,
// the peer's packets recorded before our (k+1)-th.
func recorded(c *Conversation, me int, edit func(i int, p *Packet) *Packet) func(k int) [][]byte {
	var groups [][]*Packet
	var cur []*Packet
	n := 0
	for i := range c.Packets {
		p := &c.Packets[i]
		if p.From == me {
			if n > 0 {
				groups = append(groups, cur)
			}
			cur = nil
			n++
			continue
		}
		if n > 0 {
			if edit != nil {
				p = edit(i, p)
			}
			if p != nil {
				cur = append(cur, p)
			}
		}
	}
	groups = append(groups, cur)
	return func(k int) [][]byte {
		if k > len(groups) {
			return nil
		}
		var out [][]byte
		for _, p := range groups[k-1] {
			buf := make([]byte, 1<<14)
			nn, err := bth.Encode(buf, &p.H, p.Payload)
			if err != nil {
				panic(err)
			}
			out = append(out, buf[:nn])
		}
		return out
	}
}

var unset = Live{LocalPSN: -1, PeerPSN: -1, RKey: -1}

// TestSessionCraftedAnswers: a session against a peer that answers as
// recorded agrees; one that answers wrongly, late, twice or not at all
// is reported, field by field.
func TestSessionCraftedAnswers(t *testing.T) {
	convs := load(t, "../pcaps/rxe-6.1/send_lat-uroce_client.pcap")
	c := convs[0]
	me := c.Initiator()
	newS := func(opt Options) *crafted {
		if opt.Timeout == 0 {
			opt.Timeout = time.Second
		}
		s, err := NewSession(c, me, unset, opt)
		if err != nil {
			t.Fatal(err)
		}
		return &crafted{t: t, s: s, now: time.Unix(1000, 0)}
	}
	// As recorded.
	r, sent := newS(Options{}).run(recorded(c, me, nil))
	if !r.Agree || len(r.Answers) != 10 || r.Sent != 10 {
		t.Fatalf("recorded answers: agree %v, %d answers, %d sent: %+v", r.Agree, len(r.Answers), r.Sent, r)
	}
	// The frames sent are the recording's, byte for byte (nothing to
	// rewrite).
	k := 0
	for i := range c.Packets {
		p := &c.Packets[i]
		if p.From != me {
			continue
		}
		cc := &crafted{t: t}
		if !bytes.Equal(sent[k], cc.encode(p)) {
			t.Fatalf("packet %d sent differs from the recording", k+1)
		}
		k++
	}

	// A wrong MSN in the third answer, a wrong opcode in the fifth.
	n := 0
	r, _ = newS(Options{}).run(recorded(c, me, func(i int, p *Packet) *Packet {
		n++
		q := *p
		switch n {
		case 3:
			q.H.MSN += 7
		case 4:
			q.H.BTH.Opcode = bth.Opcode(0x11) // ACK instead of a SEND
			q.H.Syndrome, q.H.MSN = bth.ACKSyndrome(31), 1
			q.Payload = nil
		}
		return &q
	}))
	if r.Agree || r.Differences["msn"] != 1 || r.Differences["opcode"] != 1 || len(r.Differences) != 2 {
		t.Fatalf("wrong answers: %+v", r.Differences)
	}
	if d := r.Answers[2].Diffs; len(d) != 1 || d[0].Field != "msn" {
		t.Fatalf("answer 3: %+v", d)
	}
	// The same differences tolerated.
	n = 0
	r, _ = newS(Options{Tolerate: map[string]bool{"msn": true}}).run(recorded(c, me, func(i int, p *Packet) *Packet {
		n++
		q := *p
		if n == 3 {
			q.H.MSN += 7
		}
		return &q
	}))
	if !r.Agree || len(r.Differences) != 0 || !r.Answers[2].Diffs[0].Tolerated {
		t.Fatalf("tolerated msn: agree %v, %+v", r.Agree, r.Differences)
	}
	// An answer that never comes: given up after the timeout, the rest
	// still matched.
	n = 0
	r, _ = newS(Options{}).run(recorded(c, me, func(i int, p *Packet) *Packet {
		n++
		if n == 10 {
			return nil
		}
		return p
	}))
	if r.Agree || r.Differences["missing"] != 1 || !r.Answers[9].Missing {
		t.Fatalf("missing answer: %+v", r.Differences)
	}
	// An answer twice: the extra one is unexpected.
	dupAnswers := recorded(c, me, nil)
	r, _ = newS(Options{}).run(func(k int) [][]byte {
		a := dupAnswers(k)
		if k == 9 && len(a) > 0 {
			a = append(a, a[len(a)-1]) // the last recorded answer, twice
		}
		return a
	})
	if r.Agree || len(r.Unexpected) != 1 {
		t.Fatalf("duplicate answer: agree %v, unexpected %v", r.Agree, r.Unexpected)
	}
	// The same, the answer a request of the peer's: with resent
	// tolerated, its retransmission is counted, not an answer.
	var last *Packet
	for i := range c.Packets {
		if c.Packets[i].From != me {
			last = &c.Packets[i]
		}
	}
	if last != nil && last.Request() {
		r, _ = newS(Options{Tolerate: map[string]bool{"resent": true}}).run(func(k int) [][]byte {
			a := dupAnswers(k)
			if k == 9 && len(a) > 0 {
				a = append(a, a[len(a)-1])
			}
			return a
		})
		if !r.Agree || r.Resent != 1 || len(r.Unexpected) != 0 {
			t.Fatalf("resent request: agree %v, resent %d, unexpected %v", r.Agree, r.Resent, r.Unexpected)
		}
	} else {
		t.Fatalf("the capture's last packet is not a request of the peer's")
	}
	// A bad ICRC is counted, not matched.
	r, _ = newS(Options{}).run(func(k int) [][]byte {
		a := recorded(c, me, nil)(k)
		if k == 1 {
			bad := append([]byte(nil), a[0]...)
			bad[len(bad)-1] ^= 1
			a = append([][]byte{bad}, a...)
		}
		return a
	})
	if r.Agree || r.BadICRC != 1 {
		t.Fatalf("bad icrc: agree %v, %d", r.Agree, r.BadICRC)
	}
}

// TestSessionFaults: the faults asked for are made to the packets sent.
func TestSessionFaults(t *testing.T) {
	c := load(t, "../pcaps/rxe-6.1/send_lat-uroce_client.pcap")[0]
	me := c.Initiator()
	s, err := NewSession(c, me, unset, Options{Pace: PaceFast, Timeout: time.Millisecond, AnswersOnly: true,
		Faults: Faults{Drop: map[int]bool{1: true}, Dup: map[int]bool{2: true}, Corrupt: map[int]bool{3: true},
			Reorder: map[int]bool{4: true}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := &crafted{t: t, s: s, now: time.Unix(1000, 0)}
	r, sent := cr.run(func(int) [][]byte { return nil })
	if r.Dropped != 1 || r.Duplicated != 1 || r.Corrupted != 1 || len(sent) != 5 {
		t.Fatalf("dropped %d duplicated %d corrupted %d, %d frames sent", r.Dropped, r.Duplicated, r.Corrupted, len(sent))
	}
	var p bth.Packet
	var psns []int
	for _, f := range sent {
		if err := bth.Parse(f, &p); err != nil {
			t.Fatal(err)
		}
		psns = append(psns, p.BTH().PSN().Sub(s.ourBase))
		if len(psns) == 3 && p.ICRCOK() {
			t.Fatal("the corrupted packet has a good ICRC")
		}
	}
	// Sends 1..5 at PSN +0..+4: 1 dropped, 2 twice, 4 after 5.
	if want := []int{1, 1, 2, 4, 3}; !equalInts(psns, want) {
		t.Fatalf("PSNs sent %v, want %v", psns, want)
	}
	if r.Agree {
		t.Fatal("a replay whose answers are all missing agrees")
	}
}

// TestSessionDupAnswer: the live peer's ACK of a request the replay sent
// twice (a --dup fault) is counted apart, not taken for the next
// recorded answer, and the replay agrees: before the recorded ACK that
// covers it (a WRITE's first packet), or after it, with a SEND of the
// peer's next (send_lat: the peer's ACK of the first copy, of the
// second, then its SEND). An ACK of an earlier PSN that was sent once is
// no such answer.
func TestSessionDupAnswer(t *testing.T) {
	for _, tc := range []struct {
		capture string
		dup     int  // the played end's packet sent twice, from 1
		psnOf   int  // the extra ACK's PSN: that of this packet, from 1
		split   bool // the extra ACK comes after the first of the recorded answers to dup
		agree   bool
	}{
		{"write_bw-uroce_client.pcap", 2, 2, false, true},
		{"write_bw-uroce_client.pcap", 2, 1, false, false},
		{"send_lat-uroce_client.pcap", 1, 1, true, true},
	} {
		c := load(t, "../pcaps/rxe-6.1/"+tc.capture)[0]
		me := c.Initiator()
		var mine []*Packet
		var ack *Packet
		for i := range c.Packets {
			p := &c.Packets[i]
			if p.From == me {
				mine = append(mine, p)
			} else if ack == nil && isPlainACK(&p.H) {
				ack = p
			}
		}
		if len(mine) < 3 || ack == nil {
			t.Fatalf("%s: %d packets of the played end, first ACK %v", tc.capture, len(mine), ack)
		}
		s, err := NewSession(c, me, unset, Options{Timeout: time.Millisecond, Faults: Faults{Dup: map[int]bool{tc.dup: true}}})
		if err != nil {
			t.Fatal(err)
		}
		cr := &crafted{t: t, s: s, now: time.Unix(1000, 0)}
		extra := *ack
		extra.H.BTH.PSN = mine[tc.psnOf-1].H.BTH.PSN
		rec := recorded(c, me, nil)
		r, _ := cr.run(func(k int) [][]byte {
			switch {
			case k < tc.dup:
				return rec(k)
			case k == tc.dup && tc.split:
				return rec(k)[:1]
			case k == tc.dup:
				return rec(k)
			case k == tc.dup+1: // after the second copy
				out := [][]byte{cr.encode(&extra)}
				if tc.split {
					out = append(out, rec(tc.dup)[1:]...)
				}
				return out
			}
			return rec(k - 1)
		})
		if r.Agree != tc.agree || (tc.agree && r.DupAnswers != 1) || r.Duplicated != 1 {
			var b bytes.Buffer
			r.WriteText(&b)
			t.Errorf("%s, packet %d twice, an ACK of packet %d's PSN: agree %v, %d answers to a duplicate; want agree %v:\n%s",
				tc.capture, tc.dup, tc.psnOf, r.Agree, r.DupAnswers, tc.agree, b.String())
		}
	}
}

// TestSessionDupREADAnswer: a READ request sent twice is executed twice
// (IBTA 9.7.5.1.1); the second answer's responses are counted apart, and
// the replay agrees.
func TestSessionDupREADAnswer(t *testing.T) {
	c := load(t, "../pcaps/rxe-6.1/read_bw-uroce_server.pcap")[0]
	me := c.Initiator()
	s, err := NewSession(c, me, unset, Options{Timeout: time.Millisecond, Faults: Faults{Dup: map[int]bool{1: true}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := &crafted{t: t, s: s, now: time.Unix(1000, 0)}
	rec := recorded(c, me, nil)
	first := len(rec(1))
	r, _ := cr.run(func(k int) [][]byte {
		switch {
		case k == 1:
			return rec(1)
		case k == 2: // the copy: its answer again
			return rec(1)
		}
		return rec(k - 1)
	})
	if !r.Agree || r.DupAnswers != first || first < 2 {
		var b bytes.Buffer
		r.WriteText(&b)
		t.Errorf("agree %v, %d answers to a duplicate, want %d:\n%s", r.Agree, r.DupAnswers, first, b.String())
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSessionCoalescedACK: a live ACK for a later PSN stands for the
// recorded ACKs before it, which are reported as coalesced.
func TestSessionCoalescedACK(t *testing.T) {
	c := load(t, "../pcaps/rxe-6.1/write_bw-uroce_client.pcap")[0]
	me := c.Initiator()
	s, err := NewSession(c, me, unset, Options{Pace: PaceFast, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var acks []*Packet
	for i := range c.Packets {
		if p := &c.Packets[i]; p.From != me {
			acks = append(acks, p)
		}
	}
	if len(acks) != 5 {
		t.Fatalf("%d recorded ACKs", len(acks))
	}
	cr := &crafted{t: t, s: s, now: time.Unix(1000, 0)}
	total := r0(s)
	r, _ := cr.run(func(k int) [][]byte {
		if k == total {
			return [][]byte{cr.encode(acks[4])}
		}
		return nil
	})
	if r.Differences["coalesced"] != 4 || len(r.Differences) != 1 || len(r.Answers) != 5 {
		t.Fatalf("coalesced: %+v, %d answers", r.Differences, len(r.Answers))
	}
}

func r0(s *Session) int { return len(s.plan) }

// TestSelfPeer replays the playing end of every reference capture at a
// uroce peer in this process: it must agree with the recording, or
// differ only as listed here, each for a reason the recording shows.
func TestSelfPeer(t *testing.T) {
	// Differences a uroce responder has from the recorded one.
	known := map[string]map[string]bool{
		// rdma_rxe ACKs every WRITE and SEND message; uroce coalesces.
		"write_bw.pcap": {"coalesced": true}, "send_bw.pcap": {"coalesced": true}, "write_bw_jumbo.pcap": {"coalesced": true},
		"write_bw-uroce_client.pcap": {"coalesced": true}, "write_bw_cm.pcap": {"coalesced": true}, "ucmatose.pcap": {"coalesced": true},
		// The recorded receiver had no receive posted (RNR NAKs); the
		// self peer has.
		"rnr-uroce_receiver.pcap": {"syndrome": true, "msn": true, "psn": true},
	}
	selfReplays(t, 2*time.Second, Faults{}, func(t *testing.T, name string, c *Conversation, me int, r *Report) {
		for field := range r.Differences {
			if !known[name][field] {
				var b bytes.Buffer
				r.WriteText(&b)
				t.Fatalf("difference in %s:\n%s", field, b.String())
			}
		}
		if len(r.Unexpected) > 0 || r.BadICRC > 0 {
			t.Fatalf("unexpected %v, bad icrc %d", r.Unexpected, r.BadICRC)
		}
		if len(known[name]) == 0 && !r.Agree {
			t.Fatal("does not agree")
		}
	})
}

// TestSelfPeerFaults replays every capture at the self peer with the
// played end's first packet dropped: each replay ends (the missing
// answers given up after the timeout, never a hang), counts the drop,
// and, when that packet was an RC request, does not agree with the
// recording.
func TestSelfPeerFaults(t *testing.T) {
	selfReplays(t, 300*time.Millisecond, Faults{Drop: map[int]bool{1: true}}, func(t *testing.T, name string, c *Conversation, me int, r *Report) {
		if r.Dropped != 1 {
			t.Errorf("%d dropped, want 1", r.Dropped)
		}
		for i := range c.Packets {
			if p := &c.Packets[i]; p.From == me {
				// UC and UD are answered by nothing on the wire: a
				// datagram lost shows in no answer.
				if p.Request() && c.Transport == bth.TransportRC && r.Agree {
					t.Error("the first request dropped, and the live answers agree with the recording")
				}
				break
			}
		}
	})
}

// selfReplays replays, in a subtest each, every conversation of every
// capture in pcaps/ and ../shared/pcaps/rxe-6.1 at a fresh self peer
// (the end that sent the first request played, answers waited for
// timeout, faults made), and gives check the report of each replay; a
// replay that does not end fails.
func selfReplays(t *testing.T, timeout time.Duration, faults Faults, check func(t *testing.T, name string, c *Conversation, me int, r *Report)) {
	var files []string
	for _, g := range []string{"../pcaps/rxe-6.1/*.pcap", "../../shared/pcaps/rxe-6.1/*.pcap"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no captures")
	}
	for _, f := range files {
		name := filepath.Base(f)
		for _, c := range load(t, f) {
			me := c.Initiator()
			t.Run(name+"/"+c.Ends[me].String(), func(t *testing.T) {
				sp, err := NewSelfPeer(c, me)
				if err != nil {
					t.Fatal(err)
				}
				defer sp.Close()
				opt := Options{Timeout: timeout, AnswersOnly: true, Faults: faults}
				if c.Adverts != AdvertNone {
					opt.PeerSend = sp.PeerSend
					opt.Tolerate = map[string]bool{"resent": true} // the self peer's own timers
				}
				s, err := NewSession(c, me, sp.Live, opt)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				r, err := Run(ctx, s, sp.Link, nil)
				if err != nil {
					t.Fatalf("the replay did not end: %v", err)
				}
				check(t, name, c, me, r)
			})
		}
	}
}

// TestLoadBadInput: what is not a capture, or has no conversation, is
// refused with an error.
func TestLoadBadInput(t *testing.T) {
	if _, _, err := Load(strings.NewReader("not a capture at all")); err == nil {
		t.Fatal("garbage loaded")
	}
	// A pcap header and no packet.
	hdr := []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0}
	if _, _, err := Load(bytes.NewReader(hdr)); !errors.Is(err, ErrNoConversation) {
		t.Fatalf("empty capture: %v", err)
	}
	raw, err := os.ReadFile("../pcaps/rxe-6.1/send_lat-uroce_client.pcap")
	if err != nil {
		t.Skip(err)
	}
	for n := 24; n < len(raw); n += 97 {
		Load(bytes.NewReader(raw[:n])) // cut anywhere: an error or fewer packets, never a panic
	}
}

func FuzzLoad(f *testing.F) {
	raw, err := os.ReadFile("../pcaps/rxe-6.1/send_lat-uroce_client.pcap")
	if err == nil {
		f.Add(raw[:min(len(raw), 600)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		convs, _, err := Load(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, c := range convs {
			for me := 0; me < 2; me++ {
				s, err := NewSession(c, me, unset, Options{Pace: PaceFast, Timeout: time.Millisecond, AnswersOnly: true})
				if err != nil {
					continue
				}
				now := time.Unix(0, 0)
				for i := 0; i < 1000 && !s.Done(); i++ {
					_, wake := s.Poll(now)
					if !wake.IsZero() {
						now = wake
					}
				}
			}
		}
	})
}

// TestLoadClient: the end that opened the exchange's TCP connection is
// the conversation's client.
func TestLoadClient(t *testing.T) {
	for _, c := range []struct{ path, client string }{
		{"../pcaps/rxe-6.1/rc_pingpong-uroce_client.pcap", "192.0.2.3"},
		{"../../shared/pcaps/rxe-6.1/write_lat.pcap", "192.0.2.2"},
	} {
		if _, err := os.Stat(c.path); err != nil {
			continue
		}
		conv := load(t, c.path)[0]
		if conv.Client < 0 || conv.Ends[conv.Client].IP.String() != c.client {
			t.Errorf("%s: client end %d of %v, want %s", c.path, conv.Client, conv.Ends, c.client)
		}
	}
}

// TestLoadCMClient: the end that sent the CM REQ naming its QP is the
// RDMA CM client; a capture without CM has none.
func TestLoadCMClient(t *testing.T) {
	path := "../../shared/pcaps/rxe-6.1/ucmatose.pcap"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no reference capture: %v", err)
	}
	conv := load(t, path)[0]
	if conv.CMClient < 0 || conv.Ends[conv.CMClient].IP.String() != "192.0.2.2" {
		t.Errorf("%s: CM client end %d of %v, want 192.0.2.2", path, conv.CMClient, conv.Ends)
	}
	if c := load(t, "../../shared/pcaps/rxe-6.1/write_lat.pcap")[0]; c.CMClient != -1 {
		t.Errorf("write_lat: CM client %d, want none", c.CMClient)
	}
}
