// Package rocelayer teaches gopacket RoCE. Importing it registers
// LayerTypeRoCE on UDP port 4791 (RoCEv2) and LayerTypeGRH on EtherType
// 0x8915 (RoCEv1, a GRH then the transport headers), so that
// gopacket.NewPacket and the pcap readers decode RoCE packets:
//
//	import _ "github.com/uroce/uroce/bth/rocelayer"
//
//	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
//	if r, ok := pkt.Layer(rocelayer.LayerTypeRoCE).(*rocelayer.RoCE); ok {
//		fmt.Println(r.Info.Name, r.BTH.PSN, r.ICRCOK(pkt))
//	}
//
// It is separate from package bth so that the data path, which never uses
// gopacket (it allocates per packet), does not link it.
package rocelayer

import (
	"fmt"
	"net"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uroce/uroce/bth"
)

// Layer types. The numbers are arbitrary but must be unique within the
// program (gopacket's own layers stay below 2000 apart from a few).
var (
	// LayerTypeRoCE is the InfiniBand transport packet: BTH, extended
	// headers, payload, pad and ICRC.
	LayerTypeRoCE = gopacket.RegisterLayerType(4791, gopacket.LayerTypeMetadata{
		Name: "RoCE", Decoder: gopacket.DecodeFunc(decodeRoCE)})
	// LayerTypeGRH is the global route header of RoCEv1.
	LayerTypeGRH = gopacket.RegisterLayerType(4792, gopacket.LayerTypeMetadata{
		Name: "GRH", Decoder: gopacket.DecodeFunc(decodeGRH)})
)

func init() {
	layers.RegisterUDPPortLayerType(bth.UDPPort, LayerTypeRoCE)
	layers.EthernetTypeMetadata[bth.EtherTypeRoCEv1] = layers.EnumMetadata{
		DecodeWith: gopacket.DecodeFunc(decodeGRH), Name: "RoCEv1", LayerType: LayerTypeGRH}
}

// RoCE is a decoded transport packet. Contents holds the BTH and the
// extended headers, Payload the payload without its pad. The header views
// alias the packet data and are nil when the opcode does not carry them.
type RoCE struct {
	layers.BaseLayer
	Info *bth.OpInfo // the opcode's table entry (or the DC layout)
	BTH  bth.BTHFields
	Pad  []byte
	ICRC uint32 // as stored (least-significant byte first)
	// Truncated is set when the capture cut the packet: only BTH and Info
	// are decoded, Contents holds what is there.
	Truncated bool

	RETH      bth.RETH
	AETH      bth.AETH
	ImmDt     bth.ImmDt
	IETH      bth.IETH
	AtomicETH bth.AtomicETH
	AtomicAck bth.AtomicAck
	DETH      bth.DETH
	RDETH     bth.RDETH
	XRCETH    bth.XRCETH
	DCETH     bth.DCETH

	ib []byte // BTH up to the ICRC, for ICRCOK
}

// LayerType returns LayerTypeRoCE.
func (r *RoCE) LayerType() gopacket.LayerType { return LayerTypeRoCE }

// CanDecode returns LayerTypeRoCE.
func (r *RoCE) CanDecode() gopacket.LayerClass { return LayerTypeRoCE }

// NextLayerType returns the payload layer.
func (r *RoCE) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes a transport packet from the BTH to the ICRC.
func (r *RoCE) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	var p bth.Packet
	err := bth.ParseTransport(data, &p)
	if err != nil && err != bth.ErrBadOpcode {
		df.SetTruncated()
		return fmt.Errorf("decode roce: %w", err)
	}
	*r = RoCE{Info: p.Info, BTH: p.BTH().Fields(), ICRC: p.ICRC(), ib: data[:len(data)-bth.ICRCLen]}
	r.Contents = data[:p.PayloadAt]
	r.Payload = p.Payload()
	r.Pad = data[p.PayloadAt+p.PayloadN : len(data)-bth.ICRCLen]
	r.RETH, r.AETH, r.ImmDt, r.IETH = p.RETH(), p.AETH(), p.ImmDt(), p.IETH()
	r.AtomicETH, r.AtomicAck, r.DETH = p.AtomicETH(), p.AtomicAck(), p.DETH()
	r.RDETH, r.XRCETH, r.DCETH = p.RDETH(), p.XRCETH(), p.DCETH()
	return nil
}

func decodeRoCE(data []byte, p gopacket.PacketBuilder) error {
	r := &RoCE{}
	if pk, ok := p.(gopacket.Packet); ok && pk.Metadata().Truncated {
		// The UDP (or GRH) length says there is more than was captured.
		if len(data) < bth.BTHLen {
			return fmt.Errorf("decode roce: %w", bth.ErrTruncated)
		}
		b := bth.BTH(data)
		r.Info, r.BTH, r.Truncated = b.Opcode().Info(), b.Fields(), true
		r.Contents = data
		p.AddLayer(r)
		return nil
	}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// ICRCOK reports whether the stored ICRC matches the one computed with
// the IP (or GRH) and UDP headers of pkt, the packet r was decoded from.
// It reports false when pkt lacks them.
func (r *RoCE) ICRCOK(pkt gopacket.Packet) bool {
	if r.Truncated || len(r.ib) < bth.BTHLen {
		return false
	}
	var got uint32
	udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	switch {
	case pkt.Layer(LayerTypeGRH) != nil:
		got = bth.ICRCv6(pkt.Layer(LayerTypeGRH).LayerContents(), nil, r.ib)
	case udp == nil:
		return false
	case pkt.Layer(layers.LayerTypeIPv4) != nil:
		got = bth.ICRCv4(pkt.Layer(layers.LayerTypeIPv4).LayerContents(), udp.Contents, r.ib)
	case pkt.Layer(layers.LayerTypeIPv6) != nil:
		got = bth.ICRCv6(pkt.Layer(layers.LayerTypeIPv6).LayerContents(), udp.Contents, r.ib)
	default:
		return false
	}
	return got == r.ICRC
}

// GRH is the 40-byte global route header that precedes the transport
// headers in RoCEv1 (EtherType 0x8915). It has the layout of an IPv6
// header; the next header is 0x1b.
type GRH struct {
	layers.BaseLayer
	TrafficClass  uint8
	FlowLabel     uint32
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	SGID, DGID    net.IP
}

// LayerType returns LayerTypeGRH.
func (g *GRH) LayerType() gopacket.LayerType { return LayerTypeGRH }

// CanDecode returns LayerTypeGRH.
func (g *GRH) CanDecode() gopacket.LayerClass { return LayerTypeGRH }

// NextLayerType returns LayerTypeRoCE for next header 0x1b.
func (g *GRH) NextLayerType() gopacket.LayerType {
	if g.NextHeader == 0x1b {
		return LayerTypeRoCE
	}
	return gopacket.LayerTypePayload
}

// NetworkFlow returns the flow between the two GIDs.
func (g *GRH) NetworkFlow() gopacket.Flow {
	return gopacket.NewFlow(layers.EndpointIPv6, g.SGID, g.DGID)
}

// DecodeFromBytes decodes the GRH.
func (g *GRH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < 40 {
		df.SetTruncated()
		return fmt.Errorf("decode grh: %d bytes, want 40", len(data))
	}
	g.TrafficClass = data[0]<<4 | data[1]>>4
	g.FlowLabel = uint32(data[1]&0x0f)<<16 | uint32(data[2])<<8 | uint32(data[3])
	g.PayloadLength = uint16(data[4])<<8 | uint16(data[5])
	g.NextHeader, g.HopLimit = data[6], data[7]
	g.SGID, g.DGID = net.IP(data[8:24]), net.IP(data[24:40])
	end := 40 + int(g.PayloadLength)
	if end > len(data) {
		df.SetTruncated()
		end = len(data)
	}
	g.Contents, g.Payload = data[:40], data[40:end]
	return nil
}

func decodeGRH(data []byte, p gopacket.PacketBuilder) error {
	g := &GRH{}
	if err := g.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(g)
	p.SetNetworkLayer(g)
	return p.NextDecoder(g.NextLayerType())
}
