package pcaptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
	"github.com/uroce/uroce/pfc"
)

// fuzzCaptures returns small crafted pcap and pcapng files.
func fuzzCaptures(t testing.TB) [][]byte {
	r := newRig(t)
	// Small captures, a conversation piece each (a few hundred bytes):
	// the fuzzer's mutations reach every part of them, where whole
	// captures of kilobytes would keep it busy with copying.
	send := r.send(40, 32) // a SEND in two packets ...
	send = append(send, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1))
	req, resp := r.read(48, 32) // a READ in two responses
	read := append([][]byte{req}, resp...)
	read = append(read, r.ack(r.psn, bth.NAKSyndrome(0), 2))
	x := newExchange(r) // an RDMA CM exchange without its RTU
	cm := x.setup(r)[:2]
	var out [][]byte
	for i, frames := range [][][]byte{send, read, cm, macControlSeeds()} {
		ps := pcaptest.Frames(frames...)
		if i == 0 {
			// A frame cut short by the snap length.
			ps[1] = pcaptest.Frame{Data: frames[1][:60], OrigLen: len(frames[1])}
		}
		for _, path := range []string{pcaptest.WritePcap(t, ps), pcaptest.WritePcapng(t, ps)} {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, data)
		}
	}
	return out
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
	for _, c := range fuzzCaptures(f) {
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
