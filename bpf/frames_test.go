package bpf

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Test frames, built with gopacket. Addresses are documentation addresses.
var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	ip4A = net.IP{192, 0, 2, 1}
	ip4B = net.IP{192, 0, 2, 2}
	ip6A = net.ParseIP("2001:db8::1")
	ip6B = net.ParseIP("2001:db8::2")
)

// bthPayload stands in for a RoCEv2 BTH, payload and ICRC.
var bthPayload = gopacket.Payload(append([]byte{0x04, 0x40, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1}, make([]byte, 4+32)...))

type frameSpec struct {
	vlan    bool
	v6      bool
	l4      string // "udp", "tcp", "icmp"
	sport   uint16
	dport   uint16
	ipOpts  int    // IPv4 option bytes (multiple of 4, at most 40)
	frag    uint16 // IPv4 flags+fragment offset field
	payload int    // extra payload bytes
}

func buildFrame(t testing.TB, s frameSpec) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	if s.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{eth}
	if s.vlan {
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 42, Type: eth.EthernetType})
		eth.EthernetType = layers.EthernetTypeDot1Q
	}
	var nl gopacket.NetworkLayer
	proto := map[string]layers.IPProtocol{"udp": layers.IPProtocolUDP, "tcp": layers.IPProtocolTCP,
		"icmp": layers.IPProtocolICMPv4}[s.l4]
	if s.v6 {
		if s.l4 == "icmp" {
			proto = layers.IPProtocolICMPv6
		}
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: ip6A, DstIP: ip6B}
		ls, nl = append(ls, ip), ip
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: ip4A, DstIP: ip4B,
			Flags: layers.IPv4Flag(s.frag >> 13), FragOffset: s.frag & 0x1fff}
		for i := 0; i < s.ipOpts/4; i++ {
			// Router Alert, 4 bytes each.
			ip.Options = append(ip.Options, layers.IPv4Option{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}})
		}
		ls, nl = append(ls, ip), ip
	}
	switch s.l4 {
	case "udp":
		u := &layers.UDP{SrcPort: layers.UDPPort(s.sport), DstPort: layers.UDPPort(s.dport)}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	case "tcp":
		tc := &layers.TCP{SrcPort: layers.TCPPort(s.sport), DstPort: layers.TCPPort(s.dport), SYN: true, Window: 1000}
		tc.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tc)
	case "icmp":
		if s.v6 {
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
			ic.SetNetworkLayerForChecksum(nl)
			ls = append(ls, ic)
		} else {
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0)})
		}
	}
	ls = append(ls, bthPayload, gopacket.Payload(make([]byte, s.payload)))
	return serialize(t, ls...)
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func arpFrame(t testing.TB) []byte {
	return serialize(t,
		&layers.Ethernet{SrcMAC: macA, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6,
			ProtAddressSize: 4, Operation: layers.ARPRequest, SourceHwAddress: macA, SourceProtAddress: ip4A,
			DstHwAddress: make([]byte, 6), DstProtAddress: ip4B})
}

func ndFrame(t testing.TB) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: ip6A,
		DstIP: net.ParseIP("ff02::1:ff00:2")}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	ic.SetNetworkLayerForChecksum(ip)
	return serialize(t,
		&layers.Ethernet{SrcMAC: macA, DstMAC: net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv6},
		ip, ic, &layers.ICMPv6NeighborSolicitation{TargetAddress: ip6B})
}

// ipv6HopByHop is a RoCE-like frame whose UDP header follows a hop-by-hop
// extension header. The program does not walk extension headers.
func ipv6HopByHop(t testing.TB) []byte {
	f := buildFrame(t, frameSpec{v6: true, l4: "udp", sport: 49152, dport: RoCEv2Port})
	l3 := 14
	out := append([]byte(nil), f[:l3+40]...)
	out[l3+6] = 0 // next header: hop-by-hop
	binary.BigEndian.PutUint16(out[l3+4:], binary.BigEndian.Uint16(f[l3+4:])+8)
	out = append(out, 17, 0, 1, 4, 0, 0, 0, 0) // next UDP, len 0 (8 bytes), PadN
	return append(out, f[l3+40:]...)
}

// isRoCE is the reference classifier the kernel program is checked against.
func isRoCE(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	et, l3 := binary.BigEndian.Uint16(f[12:]), 14
	if et == 0x8100 {
		if len(f) < 18 {
			return false
		}
		et, l3 = binary.BigEndian.Uint16(f[16:]), 18
	}
	var udp int
	switch et {
	case 0x0800:
		if len(f) < l3+20 || f[l3]>>4 != 4 || f[l3+9] != 17 || binary.BigEndian.Uint16(f[l3+6:])&0x3fff != 0 {
			return false
		}
		ihl := int(f[l3]&0xf) * 4
		if ihl < 20 {
			return false
		}
		udp = l3 + ihl
	case 0x86dd:
		if len(f) < l3+48 || f[l3]>>4 != 6 || f[l3+6] != 17 {
			return false
		}
		udp = l3 + 40
	default:
		return false
	}
	return len(f) >= udp+8 && binary.BigEndian.Uint16(f[udp+2:]) == RoCEv2Port
}

// macControlFrames are a PFC frame and a tagged PAUSE frame, which the
// program hands to the socket (not counted as RoCE).
func macControlFrames() [][]byte {
	pfc := []byte{0x01, 0x80, 0xc2, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x88, 0x08, 0x01, 0x01, 0, 0x08,
		0, 0, 0, 0, 0, 0, 0xff, 0xff}
	pause := []byte{0x01, 0x80, 0xc2, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x81, 0x00, 0x60, 0x2a, 0x88, 0x08,
		0x00, 0x01, 0xff, 0xff}
	return [][]byte{append(pfc, make([]byte, 60-len(pfc))...), append(pause, make([]byte, 64-len(pause))...)}
}
