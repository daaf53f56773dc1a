package oobtest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

type pkt struct {
	fromClient bool
	syn, ack   bool
	seq        uint32
	data       string
	roce       bool
}

func writePcap(t *testing.T, pkts []pkt) string {
	path := filepath.Join(t.TempDir(), "x.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	cli, srv := net.IPv4(192, 0, 2, 2).To4(), net.IPv4(192, 0, 2, 1).To4()
	for i, p := range pkts {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: cli, DstIP: srv}
		if !p.fromClient {
			ip.SrcIP, ip.DstIP = srv, cli
		}
		var l4 gopacket.SerializableLayer
		if p.roce {
			ip.Protocol = layers.IPProtocolUDP
			udp := &layers.UDP{SrcPort: 49441, DstPort: 4791}
			udp.SetNetworkLayerForChecksum(ip)
			l4 = udp
		} else {
			ip.Protocol = layers.IPProtocolTCP
			tcp := &layers.TCP{SrcPort: 40000, DstPort: 18515, Seq: p.seq, SYN: p.syn, ACK: p.ack, PSH: p.data != "", Window: 512}
			if !p.fromClient {
				tcp.SrcPort, tcp.DstPort = 18515, 40000
			}
			tcp.SetNetworkLayerForChecksum(ip)
			l4 = tcp
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, l4, gopacket.Payload(p.data)); err != nil {
			t.Fatal(err)
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, int64(i)), CaptureLength: len(buf.Bytes()), Length: len(buf.Bytes())}
		if err := w.WritePacket(ci, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestReadTCPStreams(t *testing.T) {
	const cISN, sISN = 1000, 5000
	path := writePcap(t, []pkt{
		{fromClient: true, syn: true, seq: cISN - 1},
		{syn: true, ack: true, seq: sISN - 1},
		{fromClient: true, ack: true, seq: cISN, data: "hello"},
		{fromClient: true, ack: true, seq: cISN, data: "hello"}, // retransmission
		{ack: true, seq: sISN + 3, data: "ld"},                  // out of order
		{ack: true, seq: sISN, data: "wor"},
		{roce: true},
		{fromClient: true, ack: true, seq: cISN + 3, data: "lo, again"}, // overlapping
		{roce: true},
	})
	ss, err := ReadTCPStreams(path, 18515)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 {
		t.Fatalf("%d streams", len(ss))
	}
	s := ss[0]
	if got := string(s.Bytes(FromClient)); got != "hello, again" {
		t.Errorf("client bytes %q", got)
	}
	if got := string(s.Bytes(FromServer)); got != "world" {
		t.Errorf("server bytes %q", got)
	}
	want := []Chunk{{FromClient, []byte("hello")}, {FromServer, []byte("wor")}, {FromServer, []byte("ld")}, {FromClient, []byte(", again")}}
	if len(s.Chunks) != len(want) {
		t.Fatalf("chunks %s", s.Dump())
	}
	for i := range want {
		if s.Chunks[i].Dir != want[i].Dir || string(s.Chunks[i].Data) != string(want[i].Data) {
			t.Errorf("chunk %d = %v %q, want %v %q", i, s.Chunks[i].Dir, s.Chunks[i].Data, want[i].Dir, want[i].Data)
		}
	}
	if m := s.Merged(); len(m) != 3 || string(m[1].Data) != "world" {
		t.Errorf("merged %q", m)
	}
	if len(s.RoCE) != 2 || s.RoCE[0] != (Position{Client: 5, Server: 5}) || s.RoCE[1] != (Position{Client: 12, Server: 5}) {
		t.Errorf("RoCE positions %+v", s.RoCE)
	}

	// A hole that is never filled is an error.
	path = writePcap(t, []pkt{
		{fromClient: true, syn: true, seq: cISN - 1},
		{fromClient: true, ack: true, seq: cISN + 2, data: "x"},
	})
	if _, err := ReadTCPStreams(path, 18515); err == nil {
		t.Error("a stream with a hole was accepted")
	}
}
