package bth

import (
	"encoding/binary"
	"hash/crc32"
)

// The invariant CRC (IBTA Annex A17.3.3 for RoCEv2, A16 for RoCEv1) is an
// IEEE CRC-32 over the packet with its variant fields masked to ones:
//
//	8 bytes 0xFF (the LRH of native InfiniBand)
//	IPv4 header: TOS, TTL and checksum set to ones (fixed 20 bytes only)
//	IPv6 header or GRH: traffic class, flow label and hop limit set to ones
//	UDP header (RoCEv2): checksum set to ones
//	BTH with byte 4 (FECN, BECN, Resv6) set to ones
//	the rest of the transport headers, the payload and the pad
//
// The result is stored least-significant byte first after the pad.

// crcFF8 is the CRC state after the eight leading 0xFF bytes.
var crcFF8 = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ICRCv4 computes the ICRC of a RoCEv2 packet over IPv4. ip is the 20-byte
// fixed IPv4 header, udp the 8-byte UDP header, and ib the transport
// packet from the BTH up to (not including) the ICRC. ib must hold at
// least a BTH. It does not allocate or copy the payload.
func ICRCv4(ip, udp, ib []byte) uint32 {
	var h [ipv4Len + udpLen + BTHLen]byte
	copy(h[0:20], ip[:20])
	h[1] = 0xff               // TOS
	h[8] = 0xff               // TTL
	h[10], h[11] = 0xff, 0xff // header checksum
	copy(h[20:28], udp[:8])
	h[26], h[27] = 0xff, 0xff // UDP checksum
	copy(h[28:40], ib[:BTHLen])
	h[28+4] = 0xff // BTH FECN/BECN/Resv6
	return icrcRest(crcSlicing(crcFF8, h[:]), ib[BTHLen:])
}

// ICRCv6 computes the ICRC of a RoCEv2 packet over IPv6 (udp non-nil) or
// of a RoCEv1 packet (udp nil, ip is the GRH). ip is the 40-byte IPv6
// header or GRH and ib the transport packet up to the ICRC.
func ICRCv6(ip, udp, ib []byte) uint32 {
	var h [ipv6Len + udpLen + BTHLen]byte
	copy(h[0:40], ip[:40])
	h[0] |= 0x0f                        // traffic class, low nibble of version byte
	h[1], h[2], h[3] = 0xff, 0xff, 0xff // traffic class and flow label
	h[7] = 0xff                         // hop limit
	n := 40
	if udp != nil {
		copy(h[40:48], udp[:8])
		h[46], h[47] = 0xff, 0xff
		n = 48
	}
	copy(h[n:n+BTHLen], ib[:BTHLen])
	h[n+4] = 0xff
	return icrcRest(crcSlicing(crcFF8, h[:n+BTHLen]), ib[BTHLen:])
}

// The masked headers live in a stack array. Handing that array to
// crc32.Update would move it to the heap (the package dispatches through
// a function variable, so the slice escapes): one allocation per packet.
// So the 40 to 60 header bytes go through the table-driven CRC below,
// which keeps them on the stack, and only the caller's transport bytes,
// the bulk of the packet, go to crc32.Update and its carry-less
// multiplication code.

// icrcRest continues crc over the transport bytes after the BTH. Below
// 64 bytes crc32 would walk byte tables like crcSlicing, only behind
// a dispatch, so short packets (ACKs, atomics, small sends) stay here.
func icrcRest(crc uint32, rest []byte) uint32 {
	if len(rest) < 64 {
		return crcSlicing(crc, rest)
	}
	return crc32.Update(crc, crc32.IEEETable, rest)
}

// slicing holds the tables of the IEEE CRC-32 processed 16 bytes at a
// time: slicing[0] is the usual byte table, slicing[k][b] the CRC of byte
// b followed by k zero bytes.
var slicing = func() (t [16][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := 0; i < 256; i++ {
		c := t[0][i]
		for k := 1; k < 16; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// crcSlicing is crc32.Update(crc, crc32.IEEETable, p) for short inputs
// that must not escape.
func crcSlicing(crc uint32, p []byte) uint32 {
	t := &slicing
	crc = ^crc
	for len(p) >= 16 {
		q := p[:16]
		crc ^= binary.LittleEndian.Uint32(q)
		crc = t[15][byte(crc)] ^ t[14][byte(crc>>8)] ^ t[13][byte(crc>>16)] ^ t[12][crc>>24] ^
			t[11][q[4]] ^ t[10][q[5]] ^ t[9][q[6]] ^ t[8][q[7]] ^
			t[7][q[8]] ^ t[6][q[9]] ^ t[5][q[10]] ^ t[4][q[11]] ^
			t[3][q[12]] ^ t[2][q[13]] ^ t[1][q[14]] ^ t[0][q[15]]
		p = p[16:]
	}
	if len(p) >= 8 {
		q := p[:8]
		crc ^= binary.LittleEndian.Uint32(q)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][crc>>24] ^
			t[3][q[4]] ^ t[2][q[5]] ^ t[1][q[6]] ^ t[0][q[7]]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// NaiveICRC is a slow, independent reference for the ICRC: it copies the
// whole pseudo-packet into a new buffer, masks it field by field and runs
// a bit-at-a-time CRC-32. It exists to check the fast versions in tests.
// l3 starts at the IP header (or GRH) and ends before the ICRC; v1 selects
// RoCEv1 (GRH, no UDP). It allocates.
func NaiveICRC(l3 []byte, v1 bool) uint32 {
	buf := make([]byte, 0, 8+len(l3))
	for i := 0; i < 8; i++ {
		buf = append(buf, 0xff)
	}
	var ipLen int
	switch {
	case v1:
		ipLen = 40
	case l3[0]>>4 == 4:
		ipLen = 20
	default:
		ipLen = 40
	}
	ip := append([]byte(nil), l3[:ipLen]...)
	if ipLen == 20 {
		ip[1] = 0xff
		ip[8] = 0xff
		ip[10] = 0xff
		ip[11] = 0xff
	} else {
		// Version (4 bits) stays; traffic class (8) and flow label (20) become ones.
		ip[0] |= 0x0f
		ip[1] = 0xff
		ip[2] = 0xff
		ip[3] = 0xff
		ip[7] = 0xff
	}
	buf = append(buf, ip...)
	rest := l3[ipLen:]
	if ipLen == 20 && l3[0]&0x0f > 5 {
		// IPv4 options are not part of the ICRC.
		rest = l3[int(l3[0]&0x0f)*4:]
	}
	if !v1 {
		udp := append([]byte(nil), rest[:8]...)
		udp[6] = 0xff
		udp[7] = 0xff
		buf = append(buf, udp...)
		rest = rest[8:]
	}
	ib := append([]byte(nil), rest...)
	ib[4] = 0xff
	buf = append(buf, ib...)
	return bitwiseCRC32(buf)
}

// bitwiseCRC32 is the IEEE CRC-32 (reflected, polynomial 0xEDB88320)
// computed one bit at a time.
func bitwiseCRC32(b []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range b {
		crc ^= uint32(c)
		for k := 0; k < 8; k++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xedb88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

func putICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

func getICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
