package pcaptool

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/pfc"
)

// readerSeeds returns FuzzReader's seeds: files of a few hundred bytes
// at most, each a header, record or block the reader treats in its own
// way with one or two small frames, so that the fuzzer's mutations reach
// every field instead of copying kilobytes of captures per input.
func readerSeeds(t testing.TB) [][]byte {
	r := newRig(t)
	le, be := binary.LittleEndian, binary.BigEndian
	only := r.send(8, 1024)[0] // a SEND_ONLY and its ACK
	ack := r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1)
	send := r.send(40, 32)      // a SEND in two packets
	req, resp := r.read(48, 32) // a READ in two responses
	nak := r.ack(r.psn, bth.NAKSyndrome(0), 3)
	cm := newExchange(r).setup(r)[:2] // an RDMA CM REQ and REP on QP1
	ip := only[14:]
	sll := append([]byte{0, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0, 0, 2, 0, 0, 0x08, 0x00}, ip...)
	sll2 := append([]byte{0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0x52, 0x54, 0, 0, 0, 2, 0, 0}, ip...)

	cut := pcapFile(le, false, LinkEthernet, send...)
	le.PutUint32(cut[24+8:], 60) // the first packet cut by the snap length
	cut = slices.Delete(cut, 24+16+60, 24+16+len(send[0]))
	huge := pcapFile(le, false, LinkEthernet, only)
	le.PutUint32(huge[24+8:], 0xfffffff0)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(pcapFile(le, false, LinkEthernet, only))
	zw.Close()

	epb := ngPacket(le, 0, only, len(only))
	badCapLen := bytes.Clone(epb)
	le.PutUint32(badCapLen[8+12:], uint32(len(only)+64)) // more than the block holds
	badBlockLen := bytes.Clone(epb)
	le.PutUint32(badBlockLen[4:], 10) // shorter than a block, not a multiple of 4
	obsolete := ngBlock(le, ngPB, le.AppendUint16(nil, 0), le.AppendUint16(nil, 0), make([]byte, 8),
		le.AppendUint32(nil, uint32(len(ack))), le.AppendUint32(nil, uint32(len(ack))), ack)
	simple := ngBlock(le, ngSPB, le.AppendUint32(nil, uint32(len(ack))), ack)
	stats := ngBlock(le, 5, make([]byte, 12)) // interface statistics: skipped

	return [][]byte{
		// Classic pcap.
		pcapFile(le, false, LinkEthernet, only, ack),
		pcapFile(be, true, LinkEthernet, only, ack), // big-endian, nanoseconds
		cut,
		pcapFile(le, false, LinkEthernet, req, resp[0], resp[1], nak),
		pcapFile(le, false, LinkEthernet, cm...), // the largest seed, 700 bytes
		pcapFile(le, false, LinkEthernet, macControlSeeds()...),
		pcapFile(le, false, LinkSLL, sll),
		pcapFile(be, false, LinkSLL2, sll2),
		pcapFile(le, true, LinkRaw, ip),
		pcapFile(le, false, 147, ack),                      // a link type without an Ethernet form
		pcapFile(le, false, LinkEthernet, only)[:24+16+10], // cut in a record
		huge,       // a record claiming 4 GiB
		gz.Bytes(), // gzip-compressed
		// pcapng.
		slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 65535, 9), epb, simple),
		slices.Concat(ngSection(be), ngInterface(be, LinkEthernet, 0, -1), ngPacket(be, 0, ack, len(ack))), // big-endian, snap length 0
		slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 65535, 0x86), obsolete, stats),          // binary time units
		slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 65535, -1), badCapLen),
		slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 65535, -1), badBlockLen),
		slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 65535, -1), ngPacket(le, 1, ack, len(ack))), // an undeclared interface
		slices.Concat(ngSection(le), ngInterface(le, LinkSLL, 65535, -1), ngPacket(le, 0, sll, len(sll)),
			ngSection(be), ngInterface(be, LinkEthernet, 96, 6), ngPacket(be, 0, nak[:60], len(nak))), // two sections
		slices.Concat(ngInterface(le, LinkEthernet, 65535, -1), epb), // no section header
	}
}

// ngBlock returns a pcapng block of type typ whose body is the parts
// given, padded to 32 bits.
func ngBlock(o byteOrder, typ uint32, parts ...[]byte) []byte {
	body := slices.Concat(parts...)
	body = append(body, make([]byte, -len(body)&3)...)
	n := uint32(12 + len(body))
	b := o.AppendUint32(o.AppendUint32(nil, typ), n)
	return o.AppendUint32(append(b, body...), n)
}

// byteOrder is what the seed builders need of a byte order.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// ngSection returns a section header block, version 1.0, of unknown
// section length.
func ngSection(o byteOrder) []byte {
	return ngBlock(o, ngSHB, o.AppendUint32(nil, 0x1a2b3c4d), o.AppendUint16(nil, 1), o.AppendUint16(nil, 0), o.AppendUint64(nil, ^uint64(0)))
}

// ngInterface returns an interface description block; tsresol < 0
// leaves out the if_tsresol option (microseconds).
func ngInterface(o byteOrder, link uint16, snaplen uint32, tsresol int) []byte {
	body := o.AppendUint32(o.AppendUint16(o.AppendUint16(nil, link), 0), snaplen)
	if tsresol >= 0 {
		body = append(o.AppendUint16(o.AppendUint16(body, 9), 1), byte(tsresol), 0, 0, 0)
		body = append(body, 0, 0, 0, 0) // opt_endofopt
	}
	return ngBlock(o, ngIDB, body)
}

// ngPacket returns an enhanced packet block of frame on interface iface,
// orig bytes long on the wire.
func ngPacket(o byteOrder, iface uint32, frame []byte, orig int) []byte {
	h := o.AppendUint32(nil, iface)
	h = o.AppendUint32(o.AppendUint32(h, 0x62ab0), 0x6a391340) // 2025-01-02, microseconds
	h = o.AppendUint32(o.AppendUint32(h, uint32(len(frame))), uint32(orig))
	return ngBlock(o, ngEPB, h, frame)
}

// macControlSeeds are small MAC Control frames: a PFC frame, a tagged
// PAUSE, and a PFC frame without its pad.
func macControlSeeds() [][]byte {
	src := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	pfcFrame := pfc.AppendPFC(nil, src, 0x28, [8]uint16{3: 0xffff})
	tagged := pfc.Fields{Dst: pfc.ReservedAddr, Src: [6]byte(src), HasVLAN: true, VLANTCI: 0x6064, Opcode: pfc.OpPause, PauseTime: 100}
	return [][]byte{pfcFrame, tagged.Append(nil), pfcFrame[:34]}
}

// FuzzReader reads arbitrary bytes as a capture file and runs every frame
// through the decoder and the verifier: no panic, bounded memory, and
// the JSON output is valid.
func FuzzReader(f *testing.F) {
	for _, c := range readerSeeds(f) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		v := NewVerifier(func(fd *Finding) {
			if b := fd.AppendJSON(nil, "f"); !json.Valid(b) {
				t.Fatalf("invalid finding JSON %q", b)
			}
			fd.AppendText(nil, "f")
		})
		var rec Record
		var ctl MACControl
		for n := 1; n < 10000; n++ {
			fr, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if !errors.Is(err, ErrLinkType) {
					break // damaged: the reader stops
				}
				continue // an unsupported link type: the frame is skipped
			}
			if fr.CapLen > MaxRecord || len(fr.Data) > MaxRecord+20 {
				t.Fatalf("record of %d bytes", fr.CapLen)
			}
			if Decode(n, &fr, &rec) {
				if b := rec.AppendJSON(nil); !json.Valid(b) {
					t.Fatalf("invalid JSON %q", b)
				}
				rec.AppendText(nil)
			} else if DecodeMACControl(n, &fr, &ctl) {
				if b := ctl.AppendJSON(nil); !json.Valid(b) {
					t.Fatalf("invalid MAC Control JSON %q", b)
				}
				ctl.AppendText(nil)
			}
			v.Frame(n, &fr)
		}
		v.Finish()
	})
}

// FuzzDecodeFrame decodes arbitrary frames, complete or cut, and checks
// the JSON stays valid and the verifier holds.
func FuzzDecodeFrame(f *testing.F) {
	r := newRig(f)
	for _, fr := range flat(r.send(600, 256), [][]byte{r.ack(3, bth.RNRSyndrome(5), 9)}, newExchange(r).setup(r)[:1], macControlSeeds()) {
		f.Add(fr, uint16(0))
		f.Add(fr, uint16(20))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		fr := Frame{Data: data, CapLen: len(data), OrigLen: len(data) + int(cut)}
		var rec Record
		var ctl MACControl
		roce := Decode(1, &fr, &rec)
		if roce {
			if b := rec.AppendJSON(nil); !json.Valid(b) {
				t.Fatalf("invalid JSON %q", b)
			}
			rec.AppendText(nil)
		}
		if DecodeMACControl(1, &fr, &ctl) {
			if roce {
				t.Fatal("both RoCE and MAC Control")
			}
			if b := ctl.AppendJSON(nil); !json.Valid(b) {
				t.Fatalf("invalid MAC Control JSON %q", b)
			}
			ctl.AppendText(nil)
		}
		v := NewVerifier(nil)
		v.Frame(1, &fr)
		v.Frame(2, &fr)
		v.Finish()
		if v.Counts.Packets != 2 || v.Counts.RoCE > 2 || v.Counts.ICRCOK+v.Counts.ICRCBad > v.Counts.RoCE || v.Counts.RoCE+v.Counts.MACControl > 2 {
			t.Fatalf("counts %+v", v.Counts)
		}
	})
}
