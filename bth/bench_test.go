package bth

import (
	"hash/crc32"
	"strconv"
	"testing"
)

// benchFrame returns an IPv4 RoCEv2 WRITE_FIRST frame whose IP packet
// (IP header through ICRC, the bytes the ICRC covers plus the ICRC) is
// size bytes long, parsed.
func benchFrame(b *testing.B, size int) (*Packet, []byte) {
	h := testHeaders(false, OpWriteFirst)
	n := size - (h.HeaderLen() - ethLen) - ICRCLen
	if n < 0 {
		h.BTH.Opcode = OpSendMiddle
		n = size - (h.HeaderLen() - ethLen) - ICRCLen
	}
	payload := make([]byte, n)
	buf := make([]byte, h.FrameLen(n))
	if _, err := Encode(buf, &h, payload); err != nil {
		b.Fatal(err)
	}
	p := new(Packet)
	if err := Parse(buf, p); err != nil {
		b.Fatal(err)
	}
	if got := p.End - p.L3; got != size {
		b.Fatalf("ip packet of %d bytes, want %d", got, size)
	}
	return p, buf
}

var sinkCRC uint32

// BenchmarkICRC measures Packet.ComputeICRC on IPv4 packets of 64 B,
// 1 KiB and 4 KiB (IP header to ICRC). GB/s counts those bytes.
func BenchmarkICRC(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			p, _ := benchFrame(b, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				sinkCRC = p.ComputeICRC()
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkCRC32 is the bound: crc32.ChecksumIEEE over the same bytes,
// without masking.
func BenchmarkCRC32(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			_, buf := benchFrame(b, size)
			data := buf[ethLen : ethLen+size-ICRCLen]
			b.SetBytes(int64(size))
			for b.Loop() {
				sinkCRC = crc32.ChecksumIEEE(data)
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkParse measures Parse of a 1 KiB WRITE_FIRST frame.
func BenchmarkParse(b *testing.B) {
	_, buf := benchFrame(b, 1024)
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(buf, &p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
}

// BenchmarkParseVerify is Parse plus the ICRC check a receiver does.
func BenchmarkParseVerify(b *testing.B) {
	_, buf := benchFrame(b, 1024)
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(buf, &p); err != nil || !p.ICRCOK() {
			b.Fatal("bad frame")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
}

// BenchmarkEncode measures Encode of a 1 KiB WRITE_FIRST frame: headers,
// IPv4 checksum, payload copy and ICRC.
func BenchmarkEncode(b *testing.B) {
	p, buf := benchFrame(b, 1024)
	var h Headers
	p.Headers(&h)
	payload := append([]byte(nil), p.Payload()...)
	out := make([]byte, len(buf))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(out, &h, payload); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
}

// BenchmarkEncodeAck measures Encode of an ACK, the smallest frame.
func BenchmarkEncodeAck(b *testing.B) {
	h := testHeaders(false, OpAck)
	out := make([]byte, 128)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(out, &h, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
}
