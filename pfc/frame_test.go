package pfc

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"
)

var testSrc = net.HardwareAddr{0x00, 0x11, 0x22, 0x33, 0x44, 0x55}

// TestAppendPauseBytes checks AppendPause against a PAUSE frame written
// out from IEEE 802.3 Annex 31B: reserved multicast destination, source,
// EtherType 0x8808, opcode 0x0001, pause_time, zero pad to 60 octets.
func TestAppendPauseBytes(t *testing.T) {
	want := []byte{
		0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, // destination 01-80-C2-00-00-01
		0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // source
		0x88, 0x08, // EtherType: MAC Control
		0x00, 0x01, // opcode: PAUSE
		0xff, 0xff, // pause_time: 65535 quanta
	}
	want = append(want, make([]byte, 42)...) // pad: 18 + 42 = 60
	got := AppendPause(nil, testSrc, 0xffff)
	if !bytes.Equal(got, want) {
		t.Errorf("AppendPause:\n got %x\nwant %x", got, want)
	}
	// Resume: pause_time 0.
	want[16], want[17] = 0, 0
	if got := AppendPause(nil, testSrc, 0); !bytes.Equal(got, want) {
		t.Errorf("AppendPause(0):\n got %x\nwant %x", got, want)
	}
}

// TestAppendPFCBytes checks AppendPFC against PFC frames written out
// from IEEE 802.1Q clause 36 and 802.3 Annex 31D: opcode 0x0101, the
// priority-enable vector (reserved octet 0, then e7..e0), time[0] to
// time[7], zero pad to 60 octets.
func TestAppendPFCBytes(t *testing.T) {
	head := []byte{
		0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, // destination 01-80-C2-00-00-01
		0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // source
		0x88, 0x08, // EtherType: MAC Control
		0x01, 0x01, // opcode: PFC
	}
	cases := []struct {
		name   string
		enable uint8
		quanta [8]uint16
		tail   []byte // vector and times
	}{
		{"prio3 paused, prio5 resumed", 0x28, [8]uint16{3: 0xffff}, []byte{
			0x00, 0x28, // vector: e3 and e5
			0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // time[0..2]
			0xff, 0xff, // time[3]
			0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // time[4..7]
		}},
		{"all priorities, distinct times", 0xff, [8]uint16{0x0001, 0x0203, 0x0405, 0x0607, 0x0809, 0x0a0b, 0x0c0d, 0x0e0f}, []byte{
			0x00, 0xff,
			0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
			0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
		}},
		{"times written as given for clear bits", 0x01, [8]uint16{7: 0x1234}, []byte{
			0x00, 0x01,
			0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x34,
		}},
	}
	for _, c := range cases {
		want := append(append(bytes.Clone(head), c.tail...), make([]byte, 26)...) // 34 + 26 = 60
		got := AppendPFC(nil, testSrc, c.enable, c.quanta)
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", c.name, got, want)
		}
	}
}

func TestAppendKeepsDst(t *testing.T) {
	prefix := []byte("head")
	b := AppendPause(bytes.Clone(prefix), testSrc, 7)
	if len(b) != len(prefix)+MinLen || !bytes.Equal(b[:4], prefix) {
		t.Fatalf("appended %x", b)
	}
	f, err := Parse(b[4:])
	if err != nil || f.PauseTime() != 7 {
		t.Errorf("parse: %v %d", err, f.PauseTime())
	}
	// A short or long hardware address: its first six bytes.
	b = AppendPause(nil, net.HardwareAddr{1, 2, 3}, 1)
	if !bytes.Equal(b[6:12], []byte{1, 2, 3, 0, 0, 0}) {
		t.Errorf("short source %x", b[6:12])
	}
	b = AppendPause(nil, net.HardwareAddr{1, 2, 3, 4, 5, 6, 7, 8}, 1)
	if !bytes.Equal(b[6:12], []byte{1, 2, 3, 4, 5, 6}) {
		t.Errorf("long source %x", b[6:12])
	}
}

// TestAppendTagged checks a tagged PFC frame byte by byte: the tag sits
// between the source and the EtherType, the frame stays 60 octets.
func TestAppendTagged(t *testing.T) {
	v := Fields{Dst: ReservedAddr, Src: [6]byte(testSrc), HasVLAN: true, VLANTCI: 0x6064, Opcode: OpPFC, Enable: 0x08, Times: [8]uint16{3: 0x0100}}
	want := []byte{
		0x01, 0x80, 0xc2, 0x00, 0x00, 0x01,
		0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
		0x81, 0x00, 0x60, 0x64, // 802.1Q: PCP 3, VID 100
		0x88, 0x08, 0x01, 0x01,
		0x00, 0x08,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	want = append(want, make([]byte, 22)...) // 38 + 22 = 60
	if got := v.Append(nil); !bytes.Equal(got, want) {
		t.Errorf("tagged:\n got %x\nwant %x", got, want)
	}
}

func TestParseRoundTrip(t *testing.T) {
	for _, v := range []Fields{
		{Dst: ReservedAddr, Src: [6]byte(testSrc), Opcode: OpPause, PauseTime: 0xffff},
		{Dst: ReservedAddr, Src: [6]byte(testSrc), Opcode: OpPause},
		{Dst: ReservedAddr, Src: [6]byte(testSrc), Opcode: OpPFC, Enable: 0x28, Times: [8]uint16{3: 0xffff}},
		{Dst: ReservedAddr, Src: [6]byte(testSrc), Opcode: OpPFC, Enable: 0xff, Times: [8]uint16{1, 2, 3, 4, 5, 6, 7, 8}},
		{Dst: [6]byte{0x52, 0x54, 0, 0, 0, 1}, Src: [6]byte(testSrc), HasVLAN: true, VLANTCI: 0xa001, Opcode: OpPFC, Enable: 0x80, Times: [8]uint16{7: 9}},
		{Dst: ReservedAddr, Src: [6]byte(testSrc), HasVLAN: true, Opcode: OpPause, PauseTime: 3},
	} {
		b := v.Append(nil)
		f, err := Parse(b)
		if err != nil || !f.Valid() || !f.Complete() || f.Err() != nil {
			t.Fatalf("%+v: %v", v, err)
		}
		if got := f.Fields(); got != v {
			t.Errorf("fields %+v, want %+v", got, v)
		}
		if again := f.Fields(); !bytes.Equal(again.Append(nil), b) {
			t.Errorf("%+v: re-encoding differs", v)
		}
		if f.HasVLAN() != v.HasVLAN || f.VLANTCI() != v.VLANTCI || f.Opcode() != v.Opcode || f.DstReserved() != (v.Dst == ReservedAddr) ||
			!bytes.Equal(f.Bytes(), b) {
			t.Errorf("%+v: accessors", v)
		}
	}
}

// TestParsePaddedTagged: what a receiver must accept, frames longer than
// the minimum (an FCS left on by the capture, a tag added by a bridge to
// a 60-octet frame, a large pad), padding that is not zero and a
// reserved vector octet that is not zero.
func TestParsePaddedTagged(t *testing.T) {
	pfc := AppendPFC(nil, testSrc, 0x28, [8]uint16{3: 0xffff, 5: 0})
	withFCS := append(bytes.Clone(pfc), 0xde, 0xad, 0xbe, 0xef)
	tagged := append(append(bytes.Clone(pfc[:12]), 0x81, 0x00, 0x20, 0x05), pfc[12:]...) // 64 octets
	big := append(bytes.Clone(pfc), make([]byte, 1440)...)
	dirty := bytes.Clone(pfc)
	for i := 34; i < len(dirty); i++ {
		dirty[i] = 0xa5
	}
	dirty[16] = 0xff // reserved octet of the vector
	for _, c := range []struct {
		name string
		b    []byte
		vlan bool
	}{{"60", pfc, false}, {"fcs", withFCS, false}, {"tagged", tagged, true}, {"large pad", big, false}, {"dirty pad", dirty, false}} {
		f, err := Parse(c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if f.Opcode() != OpPFC || f.Enable() != 0x28 || f.Time(3) != 0xffff || f.Time(5) != 0 || f.HasVLAN() != c.vlan || f.Src() != [6]byte(testSrc) {
			t.Errorf("%s: %+v", c.name, f.Fields())
		}
		if q, ok := f.Pause(3); !ok || q != 0xffff {
			t.Errorf("%s: priority 3: %d %v", c.name, q, ok)
		}
		if q, ok := f.Pause(5); !ok || q != 0 {
			t.Errorf("%s: priority 5: %d %v", c.name, q, ok)
		}
		for _, n := range []int{0, 1, 2, 4, 6, 7, -1, 8} {
			if _, ok := f.Pause(n); ok {
				t.Errorf("%s: priority %d not enabled but reported", c.name, n)
			}
		}
	}
	if f, _ := Parse(tagged); f.VLANTCI() != 0x2005 {
		t.Errorf("tci %#x", f.VLANTCI())
	}
	if f, _ := Parse(dirty); f.EnableVector() != 0xff28 || f.Enable() != 0x28 {
		t.Errorf("vector %#x", f.EnableVector())
	}
	// A PAUSE frame speaks of every priority.
	f, _ := Parse(AppendPause(nil, testSrc, 12))
	for n := range Priorities {
		if q, ok := f.Pause(n); !ok || q != 12 {
			t.Errorf("pause: priority %d: %d %v", n, q, ok)
		}
	}
	// Any destination is accepted, and told apart.
	uni := bytes.Clone(pfc)
	copy(uni, []byte{0x52, 0x54, 0, 0, 0, 1})
	if f, err := Parse(uni); err != nil || f.DstReserved() || f.Dst() != [6]byte{0x52, 0x54, 0, 0, 0, 1} {
		t.Errorf("unicast destination: %v", err)
	}
}

// TestParseRefused covers short and odd frames.
func TestParseRefused(t *testing.T) {
	pfc := AppendPFC(nil, testSrc, 0x28, [8]uint16{3: 0xffff})
	pause := AppendPause(nil, testSrc, 1)
	unknown := bytes.Clone(pause)
	unknown[15] = 0x02 // GATE
	zero := bytes.Clone(pause)
	zero[15] = 0x00
	ipv4 := bytes.Clone(pfc)
	ipv4[12], ipv4[13] = 0x08, 0x00
	tagIPv4 := append(append(bytes.Clone(pfc[:12]), 0x81, 0x00, 0x00, 0x01, 0x08, 0x00), pfc[14:]...)
	qinq := append(append(bytes.Clone(pfc[:12]), 0x88, 0xa8, 0x00, 0x01), pfc[12:]...)
	tagged := append(append(bytes.Clone(pfc[:12]), 0x81, 0x00, 0x00, 0x01), pfc[12:]...)
	cases := []struct {
		name     string
		b        []byte
		err      error
		complete bool
		op       Opcode
	}{
		{"empty", nil, ErrNotMACControl, false, 0},
		{"13 bytes", pfc[:13], ErrNotMACControl, false, 0},
		{"ipv4", ipv4, ErrNotMACControl, false, 0},
		{"tag then ipv4", tagIPv4, ErrNotMACControl, false, 0},
		{"tag cut", tagged[:16], ErrNotMACControl, false, 0},
		{"802.1ad outer tag", qinq, ErrNotMACControl, false, 0},
		{"ethertype only", pfc[:14], ErrTooShort, false, 0},
		{"half an opcode", pfc[:15], ErrTooShort, false, 0},
		{"opcode only", pfc[:16], ErrTooShort, false, OpPFC},
		{"pfc without time[7]", pfc[:33], ErrTooShort, false, OpPFC},
		{"pfc without pad", pfc[:34], ErrTooShort, true, OpPFC},
		{"pfc one short", pfc[:59], ErrTooShort, true, OpPFC},
		{"tagged pfc without pad", tagged[:38], ErrTooShort, true, OpPFC},
		{"pause without pad", pause[:18], ErrTooShort, true, OpPause},
		{"pause cut", pause[:17], ErrTooShort, false, OpPause},
		{"unknown opcode", unknown, ErrUnknownOpcode, false, 0x0002},
		{"opcode 0", zero, ErrUnknownOpcode, false, 0},
	}
	for _, c := range cases {
		f, err := Parse(c.b)
		if !errors.Is(err, c.err) || f.Err() != c.err {
			t.Errorf("%s: %v (Err %v), want %v", c.name, err, f.Err(), c.err)
			continue
		}
		if f.Valid() || f.Complete() != c.complete || f.Opcode() != c.op {
			t.Errorf("%s: valid %v complete %v opcode %v", c.name, f.Valid(), f.Complete(), f.Opcode())
		}
		if f.IsMACControl() != (c.err != ErrNotMACControl) {
			t.Errorf("%s: IsMACControl %v", c.name, f.IsMACControl())
		}
		if f.IsMACControl() && f.Src() != [6]byte(testSrc) {
			t.Errorf("%s: source %x", c.name, f.Src())
		}
		if c.complete {
			if _, ok := f.Pause(3); !ok {
				t.Errorf("%s: complete fields not readable", c.name)
			}
		} else if _, ok := f.Pause(3); ok {
			t.Errorf("%s: Pause on an incomplete frame", c.name)
		}
	}
	var zf Frame
	if zf.Valid() || zf.IsMACControl() || zf.Complete() || zf.Err() != ErrNotMACControl || zf.Opcode() != 0 {
		t.Error("zero Frame")
	}
}

func TestOpcodeString(t *testing.T) {
	for op, s := range map[Opcode]string{OpPause: "PAUSE", OpPFC: "PFC", 2: "0x0002", 0xfffe: "0xfffe", 0: "0x0000"} {
		if op.String() != s {
			t.Errorf("%#x: %q, want %q", uint16(op), op.String(), s)
		}
	}
}

// TestQuantaDuration: one quantum is 512 bit times, 51.2 ns at 10
// Gbit/s, 20.48 ns at 25 Gbit/s and 5.12 ns at 100 Gbit/s; fractions of a
// nanosecond round up.
func TestQuantaDuration(t *testing.T) {
	const G = 1_000_000_000
	for _, c := range []struct {
		q    uint16
		bps  uint64
		want time.Duration
	}{
		{0, 10 * G, 0},
		{1, 10 * G, 52},                     // 51.2 ns
		{10, 10 * G, 512},                   // exact
		{0xffff, 10 * G, 3355392},           // 65535 × 51.2 ns = 3.355392 ms, exact
		{1, 25 * G, 21},                     // 20.48 ns
		{25, 25 * G, 512},                   // exact
		{0xffff, 25 * G, 1342157},           // 1342156.8 ns
		{1, 100 * G, 6},                     // 5.12 ns
		{100, 100 * G, 512},                 // exact
		{0xffff, 100 * G, 335540},           // 335539.2 ns
		{1, 1 * G, 512},                     // 1 Gbit/s: 512 ns
		{0xffff, 1 * G, 33553920},           // 33.55392 ms
		{0xffff, 400 * G, 83885},            // 83884.8 ns
		{1, 512_000_000, time.Microsecond},  // 1 quantum = 1 µs at 512 Mbit/s
		{0xffff, 0, 0},                      // unknown speed
		{0xffff, 1, 33553920 * time.Second}, // 1 bit/s: no overflow
	} {
		if got := QuantaDuration(c.q, c.bps); got != c.want {
			t.Errorf("QuantaDuration(%d, %d) = %v, want %v", c.q, c.bps, got, c.want)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	b := AppendPFC(nil, testSrc, 0xff, [8]uint16{1, 2, 3, 4, 5, 6, 7, 8})
	short := b[:40]
	var sink uint16
	if n := testing.AllocsPerRun(100, func() {
		f, _ := Parse(b)
		sink += f.Time(7)
		f, _ = Parse(short)
		sink += uint16(f.Opcode())
	}); n != 0 {
		t.Errorf("Parse: %v allocations", n)
	}
	dst := make([]byte, 0, MinLen)
	if n := testing.AllocsPerRun(100, func() {
		dst = AppendPFC(dst[:0], testSrc, 0xff, [8]uint16{})
	}); n != 0 {
		t.Errorf("AppendPFC into a large enough buffer: %v allocations", n)
	}
	_ = sink
}
