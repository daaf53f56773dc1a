package replay

import (
	"bytes"
	"context"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// The live addresses of the two ends in the tests that play both.
var (
	liveA = Endpoint{MAC: [6]byte{2, 0, 0x5e, 0, 1, 1}, IP: netip.MustParseAddr("198.51.100.1"), QPN: 0x101}
	liveB = Endpoint{MAC: [6]byte{2, 0, 0x5e, 0, 1, 2}, IP: netip.MustParseAddr("198.51.100.2"), QPN: 0x202}
)

// both plays the two ends of c at each other, on a fake clock: end 0 as
// liveA, end 1 as liveB, with own as each end's adverts. It returns the
// sessions and the frames each sent.
func both(t *testing.T, c *Conversation, own [2]Own) ([2]*Session, [2][][]byte) {
	t.Helper()
	ends := [2]Endpoint{liveA, liveB}
	psn := [2]int64{0x100, 0xfffff0} // the second across the wrap
	var ss [2]*Session
	for k := 0; k < 2; k++ {
		s, err := NewSession(c, k, Live{Local: ends[k], Peer: ends[1-k], LocalPSN: psn[k], PeerPSN: psn[1-k], RKey: -1, Own: own[k]},
			Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ss[k] = s
	}
	sent := drive2(t, [2]Player{ss[0], ss[1]})
	if !ss[0].Done() || !ss[1].Done() {
		t.Fatal("the sessions did not end")
	}
	for k := 0; k < 2; k++ {
		if r := ss[k].Report(); !r.Agree {
			var b bytes.Buffer
			r.WriteText(&b)
			t.Fatalf("end %d does not agree:\n%s", k, b.String())
		}
	}
	return ss, sent
}

// drive2 runs two players at each other on a fake clock until both are
// done; it returns the frames each sent.
func drive2(t *testing.T, pl [2]Player) [2][][]byte {
	t.Helper()
	var sent [2][][]byte
	now := time.Unix(1, 0)
	for i := 0; i < 100000 && !(pl[0].Done() && pl[1].Done()); i++ {
		var out [2][][]byte
		var wake time.Time
		for k := 0; k < 2; k++ {
			o, w := pl[k].Poll(now)
			for _, f := range o {
				out[k] = append(out[k], append([]byte(nil), f...))
			}
			if !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
				wake = w
			}
		}
		for k := 0; k < 2; k++ {
			for _, f := range out[k] {
				if !pl[1-k].Input(f, now) {
					t.Fatalf("end %d did not take a frame of end %d", 1-k, k)
				}
			}
			sent[k] = append(sent[k], out[k]...)
		}
		switch {
		case len(out[0])+len(out[1]) > 0:
			now = now.Add(time.Microsecond)
		case wake.IsZero():
			return sent
		default:
			now = wake
		}
	}
	return sent
}

// rdmaRequests returns the R_Key and VA of the RDMA requests among frames.
func rdmaRequests(t *testing.T, frames [][]byte) (keys []uint32, vas []uint64) {
	var p bth.Packet
	for _, f := range frames {
		if err := bth.Parse(f, &p); err != nil || !p.ICRCOK() {
			t.Fatalf("a frame sent does not parse: %v", err)
		}
		if r := p.RETH(); r != nil {
			keys, vas = append(keys, r.RKey()), append(vas, r.VA())
		}
	}
	return keys, vas
}

// TestAdvertDetect: rping's and perftest's conversations are recognised
// by their SENDs, and no other reference capture is taken for one.
func TestAdvertDetect(t *testing.T) {
	c := load(t, "../../shared/pcaps/rxe-6.1/rping.pcap")
	if len(c) != 1 || c[0].Adverts != AdvertRping {
		t.Fatalf("rping: %v", c)
	}
	a, ok := ParseAdvert(AdvertRping, c[0].Packets[0].Payload)
	if !ok || a.RKey != 0x9f5 || a.VA != 0x55c28d161d50 || a.Size != 64 {
		t.Fatalf("rping's first advert: %v %v", a, ok)
	}
	if _, ok := ParseAdvert(AdvertRping, make([]byte, 16)); ok {
		t.Fatal("rping's server's all-zero SEND taken for an advert")
	}
	c = load(t, "../../shared/pcaps/rxe-6.1/write_bw_cm.pcap")
	if len(c) != 2 || c[0].Adverts != AdvertPerftest || c[1].Adverts != AdvertNone {
		t.Fatalf("write_bw_cm: %v", c)
	}
	for i := range c[0].Packets {
		p := &c[0].Packets[i]
		if a, ok := ParseAdvert(AdvertPerftest, p.Payload); ok && p.From == 1 {
			if a.RKey != 0x364 || a.VA != 0x55f21a841000 || a.QPN != 0x12 || a.GID != gidOf(netip.MustParseAddr("192.0.2.1")) {
				t.Fatalf("the server's perftest advert: %v", a)
			}
			if c[1].Packets[0].H.RKey != a.RKey || c[1].Packets[0].H.VA != a.VA {
				t.Fatal("the test conversation's WRITE does not name the advertised buffer")
			}
			break
		}
	}
	for _, f := range []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "rc_pingpong", "ucmatose", "send_lat"} {
		for _, c := range load(t, "../../shared/pcaps/rxe-6.1/"+f+".pcap") {
			if c.Adverts != AdvertNone {
				t.Errorf("%s: %v", f, c)
			}
		}
	}
}

// TestAdvertRping plays rping's two ends at each other: the client
// advertises buffers of a region of its own, the server learns them
// from its SENDs and its READs and WRITEs name them; both agree with
// the recording.
func TestAdvertRping(t *testing.T) {
	c := load(t, "../../shared/pcaps/rxe-6.1/rping.pcap")[0]
	const key, va = 0x1234, 0x7f0000000000
	ss, sent := both(t, c, [2]Own{{Set: true, RKey: key, VA: va}})
	keys, vas := rdmaRequests(t, sent[1])
	if len(keys) != 6 {
		t.Fatalf("%d RDMA requests from the server, want 6", len(keys))
	}
	for i := range keys {
		want := uint64(va) // the READ's source buffer is the lower one
		if i%2 == 1 {
			want = va + 0x1e0 // the WRITE's sink, 0x1e0 above it as recorded
		}
		if keys[i] != key || vas[i] != want {
			t.Errorf("request %d names rkey %#x va %#x, want %#x %#x", i, keys[i], vas[i], key, want)
		}
	}
	if l := ss[1].Learnt(); len(l) != 2 || l[0].Recorded.RKey != 0x9f5 || l[0].Live.RKey != key {
		t.Errorf("the server learnt %v", l)
	}

	// A peer that names the recorded buffers instead of the advertised
	// ones is reported.
	s, err := NewSession(c, 0, Live{LocalPSN: -1, PeerPSN: -1, RKey: -1, Own: Own{Set: true, RKey: key, VA: va}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cr := &crafted{t: t, s: s, now: time.Unix(1, 0)}
	r, _ := cr.run(recorded(c, 0, nil))
	if r.Agree || r.Differences["rkey"] != 6 || r.Differences["va"] != 6 {
		var b bytes.Buffer
		r.WriteText(&b)
		t.Fatalf("a peer ignoring the adverts:\n%s", b.String())
	}
}

// TestAdvertPerftest plays the two ends of ib_write_bw -R's exchange
// conversation at each other, each advertising a buffer and QP of its
// own; the client's WRITEs of the test conversation then go to the
// server's live buffer.
func TestAdvertPerftest(t *testing.T) {
	convs := load(t, "../../shared/pcaps/rxe-6.1/write_bw_cm.pcap")
	own := [2]Own{{Set: true, RKey: 0xabc, VA: 0x100000, QPN: 0x303, PSN: 0x333, PSNSet: true},
		{Set: true, RKey: 0xdef, VA: 0x200000, QPN: 0x404, PSN: 0x444, PSNSet: true}}
	ss, _ := both(t, convs[0], own)
	for k, want := range []Advert{{RKey: 0xdef, VA: 0x200000, QPN: 0x404, PSN: 0x444, GID: gidOf(liveB.IP)},
		{RKey: 0xabc, VA: 0x100000, QPN: 0x303, PSN: 0x333, GID: gidOf(liveA.IP)}} {
		l := ss[k].Learnt()
		if len(l) == 0 || l[len(l)-1].Live != want {
			t.Fatalf("end %d learnt %v, want %v", k, l, want)
		}
	}
	s, err := NewSession(convs[1], 0, Live{LocalPSN: -1, PeerPSN: -1, RKey: -1, Regions: ss[0].Learnt()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cr := &crafted{t: t, s: s, now: time.Unix(1, 0)}
	r, sent := cr.run(recorded(convs[1], 0, nil))
	if !r.Agree {
		t.Fatal("the test conversation does not agree")
	}
	wantWrites(t, sent, 5, 0xdef, 0x200000)
}

// wantWrites checks that sent holds n WRITEs with a RETH, each naming
// rkey and va.
func wantWrites(t *testing.T, sent [][]byte, n int, rkey uint32, va uint64) {
	t.Helper()
	keys, vas := rdmaRequests(t, sent)
	if len(keys) != n {
		t.Fatalf("%d WRITEs with a RETH, want %d", len(keys), n)
	}
	for i := range keys {
		if keys[i] != rkey || vas[i] != va {
			t.Errorf("WRITE %d names rkey %#x va %#x", i, keys[i], vas[i])
		}
	}
}

// TestGroupPerftest plays the whole of ib_write_bw -R's capture, both
// ends, stage by stage: the exchange conversation, then the test
// conversation (started with what the exchange taught), then the end of
// the exchange, each part in the recorded order; the WRITEs go to the
// server's advertised live buffer.
func TestGroupPerftest(t *testing.T) {
	convs := load(t, "../../shared/pcaps/rxe-6.1/write_bw_cm.pcap")
	test := convs[1]
	parts := append(Related(convs, test), test)
	if len(parts) != 2 || parts[0] != convs[0] {
		t.Fatalf("related: %v", parts)
	}
	stages := Stages(parts)
	if want := []int{3, 6, 26, 45, 65, 93}; !equalInts(stages, want) {
		t.Fatalf("stages %v, want %v", stages, want)
	}
	own := [2]Own{{Set: true, RKey: 0xabc, VA: 0x100000}, {Set: true, RKey: 0xdef, VA: 0x200000}}
	ends := [2]Endpoint{{MAC: liveA.MAC, IP: liveA.IP}, {MAC: liveB.MAC, IP: liveB.IP}}
	var g [2]*Group
	for k := range g {
		g[k] = &Group{}
	}
	var sessions [2]map[*Conversation]*Session
	var testSent [][]byte
	for i, b := range stages {
		next := 0
		if i+1 < len(stages) {
			next = stages[i+1]
		}
		for k := 0; k < 2; k++ {
			if sessions[k] == nil {
				sessions[k] = map[*Conversation]*Session{}
			}
			for _, c := range parts {
				if c.Packets[0].Frame != b {
					continue
				}
				var learnt []Region
				for _, s := range g[k].Sessions {
					learnt = append(learnt, s.Learnt()...)
				}
				live := Live{Local: ends[k], Peer: ends[1-k], LocalPSN: -1, PeerPSN: -1, RKey: -1, Regions: learnt}
				if c.Adverts != AdvertNone {
					live.Own = own[k]
				}
				s, err := NewSession(c, k, live, Options{Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				sessions[k][c] = s
				g[k].Sessions = append(g[k].Sessions, s)
			}
			for _, s := range g[k].Sessions {
				s.Limit(next)
			}
		}
		sent := drive2(t, [2]Player{g[0], g[1]})
		if b == test.Packets[0].Frame {
			testSent = sent[0]
		}
		if !g[0].Done() || !g[1].Done() {
			t.Fatalf("stage %d did not end", b)
		}
	}
	for k := 0; k < 2; k++ {
		for c, s := range sessions[k] {
			if r := s.Report(); !s.Done() || !r.Agree || len(r.Answers) != len(s.exp) {
				var buf bytes.Buffer
				r.WriteText(&buf)
				t.Fatalf("end %d, %v:\n%s", k, c, buf.String())
			}
		}
	}
	wantWrites(t, testSent, 5, 0xdef, 0x200000)
}

// TestSelfPeerAdverts plays rping's server end at a self peer that makes
// the client's SENDs itself, naming buffers of its own region: the
// server's READs and WRITEs go where those name, learnt from them alone
// (no R_Key or VA given), and the self peer executes them.
func TestSelfPeerAdverts(t *testing.T) {
	c := load(t, "../../shared/pcaps/rxe-6.1/rping.pcap")[0]
	sp, err := NewSelfPeer(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	live := sp.Live
	live.RKey, live.VASet = -1, false
	s, err := NewSession(c, 1, live, Options{Timeout: 2 * time.Second, AnswersOnly: true, PeerSend: sp.PeerSend,
		Tolerate: map[string]bool{"payload": true, "resent": true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sent [][]byte
	r, err := Run(ctx, s, sp.Link, func(f []byte, out bool) {
		if out {
			sent = append(sent, append([]byte(nil), f...))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Agree || len(r.Answers) != 18 {
		var b bytes.Buffer
		r.WriteText(&b)
		t.Fatalf("does not agree:\n%s", b.String())
	}
	l := s.Learnt()
	if len(l) != 2 || l[0].Live.RKey != sp.MR.RKey() || l[0].Live.VA != sp.MR.Addr() || l[1].Live.VA != sp.MR.Addr()+0x1e0 {
		t.Fatalf("learnt %v; the self peer's region: rkey %#x va %#x", l, sp.MR.RKey(), sp.MR.Addr())
	}
	keys, vas := rdmaRequests(t, sent)
	if len(keys) != 6 {
		t.Fatalf("%d RDMA requests", len(keys))
	}
	for i := range keys {
		if keys[i] != sp.MR.RKey() || vas[i] != sp.MR.Addr()+uint64(i%2)*0x1e0 {
			t.Errorf("request %d names rkey %#x va %#x", i, keys[i], vas[i])
		}
	}
	// The WRITEs landed: the region holds the last one's data.
	if got := sp.MR.Bytes()[0x1e0 : 0x1e0+12]; string(got) != "rdma-ping-2:" {
		t.Errorf("the region at the sink buffer holds %q", got)
	}
}

// TestGroupKeepsOrder plays both ends of ibv_srq_pingpong's capture (two
// RC conversations interleaved) as groups, step by step: the frames go
// on the wire in the recorded order, across the two QPs too.
func TestGroupKeepsOrder(t *testing.T) {
	convs := load(t, "../../shared/pcaps/rxe-6.1/srq_pingpong.pcap")
	var rc []*Conversation
	for _, c := range convs {
		if c.Transport == bth.TransportRC {
			rc = append(rc, c)
		}
	}
	if len(rc) != 2 {
		t.Fatalf("%d RC conversations, want 2", len(rc))
	}
	// Each recorded packet by the QP it goes to, its PSN and opcode.
	type key struct {
		qpn uint32
		psn bth.PSN
		op  bth.Opcode
	}
	recorded := map[key]int{}
	for _, c := range rc {
		for _, p := range c.Packets {
			recorded[key{p.H.BTH.DestQP, p.H.BTH.PSN, p.H.BTH.Opcode}] = p.Frame
		}
	}
	var g [2]*Group
	for k := range g {
		g[k] = &Group{}
		for _, c := range rc {
			s, err := NewSession(c, k, Live{Local: c.Ends[k], Peer: c.Ends[1-k], LocalPSN: -1, PeerPSN: -1, RKey: -1},
				Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			g[k].Sessions = append(g[k].Sessions, s)
		}
	}
	var frames []int
	var p bth.Packet
	now := time.Unix(1, 0)
	for i := 0; i < 1000 && !(g[0].Done() && g[1].Done()); i++ {
		n := 0
		for k := 0; k < 2; k++ {
			out, _ := g[k].Poll(now)
			for _, f := range out {
				if err := bth.Parse(f, &p); err != nil {
					t.Fatal(err)
				}
				b := p.BTH()
				frames = append(frames, recorded[key{b.DestQP(), b.PSN(), b.Opcode()}])
				if !g[1-k].Input(f, now) {
					t.Fatalf("end %d did not take frame %d", 1-k, frames[len(frames)-1])
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("nothing sent after frames %v", frames)
		}
		now = now.Add(time.Microsecond)
	}
	want := 0
	for _, c := range rc {
		want += len(c.Packets)
	}
	if len(frames) != want || !sort.IntsAreSorted(frames) {
		t.Errorf("frames on the wire %v, want the %d recorded in order", frames, want)
	}
	for k := range g {
		for _, s := range g[k].Sessions {
			if r := s.Report(); !r.Agree {
				var b bytes.Buffer
				r.WriteText(&b)
				t.Errorf("end %d:\n%s", k, b.String())
			}
		}
	}
}
