package bpf

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf/rlimit"
)

func loadForTest(t *testing.T) *Program {
	t.Helper()
	requireBPF(t)
	p, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func run(t *testing.T, p *Program, f []byte) Action {
	t.Helper()
	a, err := p.Run(f)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type namedFrame struct {
	name string
	f    []byte
	roce bool
}

func testFrames(t *testing.T) []namedFrame {
	roce := func(s frameSpec) frameSpec { s.l4, s.sport, s.dport = "udp", 49152, RoCEv2Port; return s }
	return []namedFrame{
		{"roce-v4", buildFrame(t, roce(frameSpec{})), true},
		{"roce-v6", buildFrame(t, roce(frameSpec{v6: true})), true},
		{"roce-vlan-v4", buildFrame(t, roce(frameSpec{vlan: true})), true},
		{"roce-vlan-v6", buildFrame(t, roce(frameSpec{vlan: true, v6: true})), true},
		{"roce-v4-options", buildFrame(t, roce(frameSpec{ipOpts: 8})), true},
		{"roce-v4-max-options", buildFrame(t, roce(frameSpec{ipOpts: 40})), true},
		{"roce-vlan-v4-options", buildFrame(t, roce(frameSpec{vlan: true, ipOpts: 12})), true},
		{"roce-v4-df", buildFrame(t, roce(frameSpec{frag: 0x4000})), true},
		{"arp", arpFrame(t), false},
		{"nd", ndFrame(t), false},
		{"icmp-v4", buildFrame(t, frameSpec{l4: "icmp"}), false},
		{"icmp-v6", buildFrame(t, frameSpec{v6: true, l4: "icmp"}), false},
		{"tcp-4791", buildFrame(t, frameSpec{l4: "tcp", sport: 40000, dport: RoCEv2Port}), false},
		{"tcp-v6-4791", buildFrame(t, frameSpec{v6: true, l4: "tcp", sport: 40000, dport: RoCEv2Port}), false},
		{"udp-53", buildFrame(t, frameSpec{l4: "udp", sport: 40000, dport: 53}), false},
		{"udp-v6-53", buildFrame(t, frameSpec{v6: true, l4: "udp", sport: 40000, dport: 53}), false},
		{"udp-sport-4791", buildFrame(t, frameSpec{l4: "udp", sport: RoCEv2Port, dport: 53}), false},
		{"udp-vlan-53", buildFrame(t, frameSpec{vlan: true, l4: "udp", sport: 40000, dport: 53}), false},
		{"roce-v4-first-fragment", buildFrame(t, roce(frameSpec{frag: 0x2000})), false},
		{"roce-v4-later-fragment", buildFrame(t, roce(frameSpec{frag: 0x0010})), false},
		{"roce-v6-hop-by-hop", ipv6HopByHop(t), false},
		{"roce-qinq", qinq(buildFrame(t, roce(frameSpec{vlan: true}))), false},
		{"roce-v4-ihl-4", setIHL(buildFrame(t, roce(frameSpec{})), 4), false},
		{"roce-v4-version-6", setVersion(buildFrame(t, roce(frameSpec{})), 6), false},
		{"short-ethernet", make([]byte, 14), false},
	}
}

func qinq(f []byte) []byte {
	out := append([]byte(nil), f[:16]...)
	out = append(out, 0x81, 0x00, 0, 7) // a second tag
	return append(out, f[16:]...)
}

func setIHL(f []byte, ihl byte) []byte   { f[14] = f[14]&0xf0 | ihl; return f }
func setVersion(f []byte, v byte) []byte { f[14] = v<<4 | f[14]&0x0f; return f }

// With no socket registered the program passes everything; with the drop
// knob at 1 it drops exactly the RoCEv2 frames, which shows the
// classification without needing a socket. Redirects are tested with a real
// socket in package xdp.
func TestVerdicts(t *testing.T) {
	p := loadForTest(t)
	frames := testFrames(t)
	roce := 0
	for _, nf := range frames {
		if isRoCE(nf.f) != nf.roce {
			t.Fatalf("%s: reference classifier says %v, want %v", nf.name, isRoCE(nf.f), nf.roce)
		}
		if nf.roce {
			roce++
		}
		if a := run(t, p, nf.f); a != Pass {
			t.Errorf("%s, no socket: %v, want XDP_PASS", nf.name, a)
		}
	}
	if err := p.SetDropEvery(1); err != nil {
		t.Fatal(err)
	}
	for _, nf := range frames {
		want := Pass
		if nf.roce {
			want = Drop
		}
		if a := run(t, p, nf.f); a != want {
			t.Errorf("%s, drop every 1: %v, want %v", nf.name, a, want)
		}
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// MAC Control frames are neither counted nor dropped.
	for _, f := range macControlFrames() {
		if a := run(t, p, f); a != Pass {
			t.Errorf("MAC control frame, no socket, drop every 1: %v, want XDP_PASS", a)
		}
	}
	if st, err = p.Stats(); err != nil {
		t.Fatal(err)
	}
	if want := (Stats{RoCE: uint64(2 * roce), Dropped: uint64(roce)}); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}

// Every prefix of a RoCEv2 frame is classified like the reference: RoCEv2
// once the UDP header is complete, passed before that.
func TestTruncatedFrames(t *testing.T) {
	p := loadForTest(t)
	if err := p.SetDropEvery(1); err != nil {
		t.Fatal(err)
	}
	for _, nf := range testFrames(t) {
		if !nf.roce {
			continue
		}
		udpEnd := len(nf.f) - len(bthPayload)
		for n := 14; n <= len(nf.f); n++ {
			want := Pass
			if n >= udpEnd {
				want = Drop
			}
			if isRoCE(nf.f[:n]) != (want == Drop) {
				t.Fatalf("%s[:%d]: reference disagrees with the header layout", nf.name, n)
			}
			if a := run(t, p, nf.f[:n]); a != want {
				t.Errorf("%s truncated to %d bytes: %v, want %v", nf.name, n, a, want)
			}
		}
	}
}

// Random corruptions of the headers are classified as the reference
// classifier does.
func TestMutatedFramesAgainstReference(t *testing.T) {
	p := loadForTest(t)
	if err := p.SetDropEvery(1); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	frames := testFrames(t)
	interesting := []byte{0x00, 0x06, 0x11, 0x12, 0x45, 0x46, 0x4f, 0x60, 0x81, 0x86, 0x88, 0x08, 0xdd, 0xb7, 0x12, 0xff}
	var seen [2]int
	for i := 0; i < 3000; i++ {
		f := append([]byte(nil), frames[rng.IntN(len(frames))].f...)
		for k := 1 + rng.IntN(3); k > 0; k-- {
			pos := rng.IntN(min(len(f), 80))
			if rng.IntN(2) == 0 {
				f[pos] = interesting[rng.IntN(len(interesting))]
			} else {
				f[pos] = byte(rng.Uint32())
			}
		}
		if rng.IntN(4) == 0 {
			f = f[:14+rng.IntN(len(f)-13)]
		}
		want := Pass
		if isRoCE(f) {
			want = Drop
			seen[1]++
		} else {
			seen[0]++
		}
		if a := run(t, p, f); a != want {
			t.Fatalf("mutated frame % x: %v, want %v", f, a, want)
		}
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Errorf("mutations only produced one class: %v", seen)
	}
}

func TestDropEvery(t *testing.T) {
	p := loadForTest(t)
	f := buildFrame(t, frameSpec{l4: "udp", sport: 49152, dport: RoCEv2Port})
	other := buildFrame(t, frameSpec{l4: "udp", sport: 49152, dport: 53})
	if err := p.SetDropEvery(3); err != nil {
		t.Fatal(err)
	}
	var got []Action
	for i := 0; i < 9; i++ {
		got = append(got, run(t, p, f))
		if a := run(t, p, other); a != Pass {
			t.Fatalf("non-RoCE frame: %v", a)
		}
	}
	want := []Action{Pass, Pass, Drop, Pass, Pass, Drop, Pass, Pass, Drop}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("verdicts = %v, want %v", got, want)
		}
	}
	if err := p.SetDropEvery(0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if a := run(t, p, f); a != Pass {
			t.Fatalf("drop off: %v, want XDP_PASS", a)
		}
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{RoCE: 14, Dropped: 3}) {
		t.Errorf("Stats = %+v, want {RoCE:14 Dropped:3}", st)
	}
}

// A frame larger than a page is run through the frags path of the kernel
// (the program is loaded with BPF_F_XDP_HAS_FRAGS).
func TestJumboFrame(t *testing.T) {
	p := loadForTest(t)
	if err := p.SetDropEvery(1); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		f := buildFrame(t, frameSpec{v6: v6, l4: "udp", sport: 49152, dport: RoCEv2Port, payload: 8900})
		if a := run(t, p, f); a != Drop {
			t.Errorf("%d-byte RoCE frame (v6 %v): %v, want XDP_DROP", len(f), v6, a)
		}
		o := buildFrame(t, frameSpec{v6: v6, l4: "udp", sport: 49152, dport: 4792, payload: 8900})
		if a := run(t, p, o); a != Pass {
			t.Errorf("%d-byte UDP frame (v6 %v): %v, want XDP_PASS", len(o), v6, a)
		}
	}
}

func TestClosed(t *testing.T) {
	p := loadForTest(t)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(make([]byte, 64)); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := p.Register(0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Register after Close: %v", err)
	}
	if err := p.Attach(1, Auto); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v", err)
	}
	if err := p.Register(-1, 0); err == nil {
		t.Error("Register(-1) succeeded")
	}
	if err := p.Unregister(MaxQueues); err == nil {
		t.Error("Unregister(MaxQueues) succeeded")
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"auto": Auto, "": Auto, "native": Native, "drv": Native, "generic": Generic, "SKB": Generic} {
		if m, err := ParseMode(s); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", s, m, err, want)
		}
		if want != Auto || s == "auto" {
			if m, _ := ParseMode(want.String()); m != want {
				t.Errorf("ParseMode(%v.String()) = %v", want, m)
			}
		}
	}
	if _, err := ParseMode("hw"); err == nil {
		t.Error(`ParseMode("hw") succeeded`)
	}
}

var _ = rlimit.RemoveMemlock
