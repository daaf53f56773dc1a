package pfc

import (
	"bytes"
	"testing"
)

// FuzzParse parses arbitrary bytes as a frame: no panic, accessors stay
// within the frame, a Valid frame re-encodes to the same fields, and a
// Pauser fed the frame keeps consistent counters.
func FuzzParse(f *testing.F) {
	pfc := AppendPFC(nil, testSrc, 0x28, [8]uint16{3: 0xffff})
	tagged := append(append(bytes.Clone(pfc[:12]), 0x81, 0x00, 0x60, 0x64), pfc[12:]...)
	gate := AppendPause(nil, testSrc, 1)
	gate[15] = 2
	for _, seed := range [][]byte{
		AppendPause(nil, testSrc, 0xffff), // PAUSE
		pfc,                               // PFC
		tagged,                            // tagged PFC, 64 bytes
		pfc[:34],                          // PFC without its pad
		pfc[:16],                          // just the opcode
		tagged[:18],                       // tag and EtherType
		gate,                              // unsupported opcode
		pfc[:14],                          // Ethernet header only
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Parse(b)
		if err != fr.Err() {
			t.Fatalf("Parse error %v, Err %v", err, fr.Err())
		}
		if fr.Valid() != (err == nil) || (fr.Valid() && !fr.Complete()) {
			t.Fatalf("valid %v complete %v error %v", fr.Valid(), fr.Complete(), err)
		}
		if fr.IsMACControl() {
			_, _, _ = fr.Dst(), fr.Src(), fr.Opcode()
			for n := -1; n <= Priorities; n++ {
				fr.Pause(n)
			}
		}
		if fr.Complete() {
			v := fr.Fields()
			b2 := v.Append(nil)
			fr2, err := Parse(b2)
			if err != nil || fr2.Fields() != v {
				t.Fatalf("re-encoded %x: %v, fields %+v, want %+v", b2, err, fr2.Fields(), v)
			}
		}
		var p Pauser
		p.Receive(0, fr, 10_000_000_000)
		p.Receive(1000, fr, 25_000_000_000)
		for n := range Priorities {
			if p.Paused(1000, n) && p.Until(n) <= 1000 {
				t.Fatalf("priority %d paused until %v", n, p.Until(n))
			}
		}
		c := p.Counters(1 << 40)
		if c.MACControl != c.PauseCtrl+c.Ignored || c.UnsupportedOp > c.Ignored {
			t.Fatalf("counters %+v", c)
		}
		if _, ok := p.Deadline(); ok {
			t.Fatal("a pause outlived the longest pause time")
		}
	})
}
