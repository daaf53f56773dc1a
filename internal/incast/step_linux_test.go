package incast

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/uroce/uroce/internal/netns/netnstest"
)

// TestFieldOffset finds fields through anonymous unions and structs, as in
// struct sk_buff, whose dev sits in an anonymous struct in an anonymous
// union.
func TestFieldOffset(t *testing.T) {
	u32 := &btf.Int{Name: "u32", Size: 4}
	ptr := &btf.Pointer{Target: &btf.Void{}}
	stats := &btf.Struct{Name: "gnet_stats_queue", Size: 8, Members: []btf.Member{
		{Name: "qlen", Type: u32, Offset: 0},
		{Name: "backlog", Type: &btf.Typedef{Name: "__u32", Type: u32}, Offset: 32},
	}}
	skb := &btf.Struct{Name: "sk_buff", Size: 64, Members: []btf.Member{
		{Type: &btf.Union{Size: 24, Members: []btf.Member{
			{Type: &btf.Struct{Size: 24, Members: []btf.Member{
				{Name: "next", Type: ptr, Offset: 0},
				{Name: "prev", Type: ptr, Offset: 64},
				{Type: &btf.Union{Size: 8, Members: []btf.Member{
					{Name: "dev", Type: ptr},
					{Name: "dev_scratch", Type: u32},
				}}, Offset: 128},
			}}},
		}}},
		{Name: "qstats", Type: stats, Offset: 192},
	}}
	for _, tc := range []struct {
		path []string
		want uint32
	}{
		{[]string{"next"}, 0},
		{[]string{"prev"}, 8},
		{[]string{"dev"}, 16},
		{[]string{"qstats"}, 24},
		{[]string{"qstats", "backlog"}, 28},
	} {
		got, err := fieldOffset(skb, tc.path)
		if err != nil || got != tc.want {
			t.Errorf("fieldOffset(%v) = %d, %v; want %d", tc.path, got, err, tc.want)
		}
	}
	for _, path := range [][]string{{"sk"}, {"dev", "x"}, {"qstats", "drops"}} {
		if off, err := fieldOffset(skb, path); err == nil {
			t.Errorf("fieldOffset(%v) = %d, want an error", path, off)
		}
	}
}

// udp4Frame returns an Ethernet frame holding an IPv4 UDP datagram with the
// given TOS byte and a valid header checksum.
func udp4Frame(tos byte) []byte {
	f := make([]byte, 14+20+8+18)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[1] = 0x45, tos
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{192, 0, 2, 11, 192, 0, 2, 2})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	binary.BigEndian.PutUint16(f[34:], 9000)
	binary.BigEndian.PutUint16(f[36:], 9000)
	binary.BigEndian.PutUint16(f[38:], 8+18)
	return f
}

// ipChecksum returns the one's complement of the one's complement sum of
// hdr's 16-bit words: the checksum to store, or 0 over a valid header.
func ipChecksum(hdr []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TestStepProgram runs the marker with BPF_PROG_TEST_RUN, where the packet
// belongs to the loopback device and its qdisc holds nothing: with a
// threshold of 0 it must set CE on ECN-capable packets only (with a valid
// checksum), with a threshold above 0 never, and it counts every packet.
func TestStepProgram(t *testing.T) {
	netnstest.RequireRoot(t)
	off, err := stepSupport()
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel offsets: %+v", off)
	for _, tc := range []struct {
		name      string
		thresh    int32
		tos, want byte
		marked    uint64
	}{
		{"ect0 at threshold 0", 0, ect0, ce, 1},
		{"ect1 at threshold 0", 0, 0x01, ce, 1},
		{"already ce", 0, ce, ce, 1},
		{"not ect", 0, notECT, notECT, 0},
		{"dscp kept", 0, 0xb8 | ect0, 0xb8 | ce, 1},
		{"below threshold", 1, ect0, ect0, 0},
	} {
		coll, err := ebpf.NewCollection(stepSpec(stepParams{off: off, thresh: tc.thresh, limit: 250000}))
		if err != nil {
			t.Fatalf("%s: load: %v", tc.name, err)
		}
		m := &stepMarker{coll: coll}
		in := udp4Frame(tc.tos)
		out := make([]byte, len(in)+64)
		opts := &ebpf.RunOptions{Data: in, DataOut: out}
		ret, err := coll.Programs[stepProgName].Run(opts)
		if err != nil {
			m.Close()
			t.Fatalf("%s: run: %v", tc.name, err)
		}
		out = opts.DataOut
		c, err := m.counters()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int32(ret) != tcxNext {
			t.Errorf("%s: returned %d, want TCX_NEXT", tc.name, int32(ret))
		}
		if len(out) != len(in) || out[15] != tc.want || ipChecksum(out[14:34]) != 0 {
			t.Errorf("%s: TOS %#x (checksum ok: %v), want %#x", tc.name, out[15], ipChecksum(out[14:34]) == 0, tc.want)
		}
		// The loopback device's qdisc holds nothing.
		if c.Packets != 1 || c.Marked != tc.marked || c.Arrivals != 1 || c.Backlog != 0 {
			t.Errorf("%s: counters %+v, want 1 packet, %d marked, 1 arrival finding 0 bytes", tc.name, c, tc.marked)
		}
	}
}
