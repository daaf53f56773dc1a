package oobtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Dir says which side of a TCP connection wrote a Chunk.
type Dir int

// The two directions of a connection. The client is the side that sent the
// SYN.
const (
	FromClient Dir = iota
	FromServer
)

func (d Dir) String() string {
	if d == FromClient {
		return "client"
	}
	return "server"
}

// Chunk is the payload of one TCP segment (or of several adjacent segments in
// the same direction, after Merge), in capture order.
type Chunk struct {
	Dir  Dir
	Data []byte
}

// Stream is one reassembled TCP connection.
type Stream struct {
	Client, Server netip.AddrPort
	// Chunks holds every payload-carrying segment, deduplicated by sequence
	// number (retransmissions dropped) and ordered as captured.
	Chunks []Chunk
	// RoCE holds, for every RoCEv2 packet (UDP port 4791) captured while the
	// connection was open, how many bytes each side had sent on it by then:
	// where the RDMA traffic sits in the exchange.
	RoCE []Position
}

// Position is a point in a TCP exchange: the bytes each side had sent.
type Position struct {
	Client, Server int
}

// Bytes returns everything one side wrote, concatenated.
func (s *Stream) Bytes(d Dir) []byte {
	var b []byte
	for _, c := range s.Chunks {
		if c.Dir == d {
			b = append(b, c.Data...)
		}
	}
	return b
}

// Merged returns the chunks with adjacent same-direction chunks joined: the
// messages of one side between two messages of the other.
func (s *Stream) Merged() []Chunk {
	var out []Chunk
	for _, c := range s.Chunks {
		if n := len(out); n > 0 && out[n-1].Dir == c.Dir {
			out[n-1].Data = append(out[n-1].Data, c.Data...)
			continue
		}
		out = append(out, Chunk{Dir: c.Dir, Data: append([]byte(nil), c.Data...)})
	}
	return out
}

type flowKey struct{ a, b netip.AddrPort }

type halfFlow struct {
	isn    uint32
	hasISN bool
	// seen records the relative sequence ranges already taken, to drop
	// retransmitted data.
	next uint32
}

type segment struct {
	dir  Dir
	seq  uint32
	data []byte
}

type conn struct {
	client, server netip.AddrPort
	half           [2]halfFlow
	segs           []segment
	// roce records, per RoCE packet, how many segments had been captured.
	roce   []int
	closed bool
}

// ReadTCPStreams reads a classic pcap file (Ethernet link type) and returns
// the TCP connections on the given port that carried data, in the order
// their SYNs were captured.
func ReadTCPStreams(path string, port uint16) ([]*Stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read capture: %w", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read capture %s: %w", path, err)
	}
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		tcp     layers.TCP
		udp     layers.UDP
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &tcp, &udp, &payload)
	parser.IgnoreUnsupported = true
	var conns []*conn
	byKey := map[flowKey]*conn{}
	decoded := make([]gopacket.LayerType, 0, 8)
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read capture %s: %w", path, err)
		}
		if err := parser.DecodeLayers(data, &decoded); err != nil {
			continue
		}
		var src, dst netip.Addr
		isTCP, isRoCE := false, false
		for _, lt := range decoded {
			switch lt {
			case layers.LayerTypeIPv4:
				src, _ = netip.AddrFromSlice(ip4.SrcIP)
				dst, _ = netip.AddrFromSlice(ip4.DstIP)
			case layers.LayerTypeIPv6:
				src, _ = netip.AddrFromSlice(ip6.SrcIP)
				dst, _ = netip.AddrFromSlice(ip6.DstIP)
			case layers.LayerTypeTCP:
				isTCP = true
			case layers.LayerTypeUDP:
				isRoCE = udp.DstPort == 4791
			}
		}
		if isRoCE {
			for _, c := range conns {
				if !c.closed {
					c.roce = append(c.roce, len(c.segs))
				}
			}
			continue
		}
		if !isTCP || (uint16(tcp.SrcPort) != port && uint16(tcp.DstPort) != port) {
			continue
		}
		s := netip.AddrPortFrom(src, uint16(tcp.SrcPort))
		d := netip.AddrPortFrom(dst, uint16(tcp.DstPort))
		if tcp.SYN && !tcp.ACK {
			c := &conn{client: s, server: d}
			c.half[FromClient] = halfFlow{isn: tcp.Seq + 1, hasISN: true}
			byKey[flowKey{s, d}] = c
			conns = append(conns, c)
			continue
		}
		var c *conn
		var dir Dir
		if c = byKey[flowKey{s, d}]; c != nil {
			dir = FromClient
		} else if c = byKey[flowKey{d, s}]; c != nil {
			dir = FromServer
		} else {
			continue
		}
		if tcp.FIN || tcp.RST {
			c.closed = true
		}
		h := &c.half[dir]
		if tcp.SYN {
			h.isn, h.hasISN = tcp.Seq+1, true
			continue
		}
		if len(tcp.Payload) == 0 || !h.hasISN {
			continue
		}
		c.segs = append(c.segs, segment{dir: dir, seq: tcp.Seq - h.isn, data: append([]byte(nil), tcp.Payload...)})
	}
	var out []*Stream
	for _, c := range conns {
		st, err := c.assemble()
		if err != nil {
			return nil, fmt.Errorf("read capture %s: %w", path, err)
		}
		if len(st.Chunks) > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// assemble drops retransmitted bytes and checks that each direction is
// contiguous from its initial sequence number.
func (c *conn) assemble() (*Stream, error) {
	st := &Stream{Client: c.client, Server: c.server}
	var next [2]uint32
	// Capture order is kept; a segment that starts beyond the next expected
	// byte means a hole, which the captures are not expected to have.
	pending := [2][]segment{}
	roce := c.roce
	for i, sg := range c.segs {
		for len(roce) > 0 && roce[0] <= i {
			st.RoCE = append(st.RoCE, Position{Client: int(next[FromClient]), Server: int(next[FromServer])})
			roce = roce[1:]
		}
		pending[sg.dir] = append(pending[sg.dir], sg)
		sort.SliceStable(pending[sg.dir], func(i, j int) bool { return pending[sg.dir][i].seq < pending[sg.dir][j].seq })
		for len(pending[sg.dir]) > 0 {
			p := pending[sg.dir][0]
			end := p.seq + uint32(len(p.data))
			if end <= next[sg.dir] {
				pending[sg.dir] = pending[sg.dir][1:]
				continue
			}
			if p.seq > next[sg.dir] {
				break
			}
			fresh := p.data[next[sg.dir]-p.seq:]
			st.Chunks = append(st.Chunks, Chunk{Dir: p.dir, Data: fresh})
			next[sg.dir] = end
			pending[sg.dir] = pending[sg.dir][1:]
		}
	}
	for range roce {
		st.RoCE = append(st.RoCE, Position{Client: int(next[FromClient]), Server: int(next[FromServer])})
	}
	for d, p := range pending {
		if len(p) > 0 {
			return nil, fmt.Errorf("tcp %v->%v: %s side has a hole at relative seq %d", c.client, c.server, Dir(d), next[d])
		}
	}
	return st, nil
}

// Dump formats a stream for humans: one line per chunk with its direction,
// length, printable text and hex.
func (s *Stream) Dump() string {
	var b bytes.Buffer
	for i, c := range s.Chunks {
		fmt.Fprintf(&b, "%3d %-6s %4d %q\n", i, c.Dir, len(c.Data), c.Data)
	}
	return b.String()
}
