package pcaptool

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
)

// readAll reads every frame of a capture held in memory.
func readAll(t *testing.T, data []byte) ([]Frame, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var out []Frame
	for {
		f, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		f.Data = bytes.Clone(f.Data)
		out = append(out, f)
	}
}

// TestReaderMatchesPcapgo reads every reference capture with this reader
// and with gopacket's, and compares frames, lengths and timestamps.
func TestReaderMatchesPcapgo(t *testing.T) {
	n := 0
	for _, path := range sharedFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := readAll(t, data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ref, err := pcapgo.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			d, ci, err := ref.ReadPacketData()
			if err == io.EOF {
				if i != len(ours) {
					t.Errorf("%s: %d frames, pcapgo %d", path, len(ours), i)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			f := ours[i]
			if !bytes.Equal(f.Data, d) || f.CapLen != ci.CaptureLength || f.OrigLen != ci.Length || !f.Time.Equal(ci.Timestamp) {
				t.Fatalf("%s frame %d differs from pcapgo", path, i+1)
			}
			n++
		}
	}
	t.Logf("%d frames compared", n)
}

func TestReaderPcapng(t *testing.T) {
	r := newRig(t)
	frames := flat(r.send(3000, 1024), [][]byte{r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1)})
	ps := pcaptest.Frames(frames...)
	ps[1] = pcaptest.Frame{Data: frames[1][:100], OrigLen: len(frames[1])}
	for _, path := range []string{pcaptest.WritePcap(t, ps), pcaptest.WritePcapng(t, ps)} {
		data, _ := os.ReadFile(path)
		got, err := readAll(t, data)
		if err != nil || len(got) != len(frames) {
			t.Fatalf("%s: %d frames, %v", path, len(got), err)
		}
		for i, f := range got {
			if !bytes.Equal(f.Data, ps[i].Data) || f.Truncated() != (i == 1) || f.LinkType != LinkEthernet {
				t.Errorf("%s frame %d: %d bytes, truncated %v", path, i+1, len(f.Data), f.Truncated())
			}
			want := pcaptest.Start.Add(time.Duration(i) * time.Millisecond)
			if !f.Time.Equal(want) {
				t.Errorf("%s frame %d: time %v, want %v", path, i+1, f.Time, want)
			}
		}
		// gzip-compressed copies read the same.
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(data)
		zw.Close()
		if gz, err := readAll(t, z.Bytes()); err != nil || len(gz) != len(got) {
			t.Errorf("%s gzipped: %d frames, %v", path, len(gz), err)
		}
	}
}

// pcapFile builds a classic pcap by hand: byte order, nanosecond magic
// and link type chosen by the test.
func pcapFile(order binary.ByteOrder, nanos bool, link uint32, recs ...[]byte) []byte {
	h := make([]byte, 24)
	magic := uint32(0xa1b2c3d4)
	if nanos {
		magic = 0xa1b23c4d
	}
	order.PutUint32(h, magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], 65535)
	order.PutUint32(h[20:], link)
	for i, r := range recs {
		rh := make([]byte, 16)
		order.PutUint32(rh, 1700000000)
		order.PutUint32(rh[4:], uint32(i+1))
		order.PutUint32(rh[8:], uint32(len(r)))
		order.PutUint32(rh[12:], uint32(len(r)))
		h = append(h, rh...)
		h = append(h, r...)
	}
	return h
}

func TestReaderByteOrderAndLinkTypes(t *testing.T) {
	r := newRig(t)
	eth := r.send(100, 1024)[0]
	ip := eth[14:]
	sll := append([]byte{0, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0, 0, 2, 0, 0, 0x08, 0x00}, ip...)
	sll2 := append([]byte{0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0x52, 0x54, 0, 0, 0, 2, 0, 0}, ip...)
	for _, c := range []struct {
		name  string
		order binary.ByteOrder
		nanos bool
		link  uint32
		rec   []byte
	}{
		{"ethernet big-endian", binary.BigEndian, false, LinkEthernet, eth},
		{"ethernet nanoseconds", binary.LittleEndian, true, LinkEthernet, eth},
		{"linux cooked", binary.LittleEndian, false, LinkSLL, sll},
		{"linux cooked v2", binary.BigEndian, true, LinkSLL2, sll2},
		{"raw ip", binary.LittleEndian, false, LinkRaw, ip},
		{"ipv4", binary.LittleEndian, false, LinkIPv4, ip},
	} {
		got, err := readAll(t, pcapFile(c.order, c.nanos, c.link, c.rec, c.rec))
		if err != nil || len(got) != 2 {
			t.Fatalf("%s: %d frames, %v", c.name, len(got), err)
		}
		frac := time.Microsecond
		if c.nanos {
			frac = time.Nanosecond
		}
		if want := time.Unix(1700000000, 0).Add(2 * frac); !got[1].Time.Equal(want) {
			t.Errorf("%s: time %v, want %v", c.name, got[1].Time, want)
		}
		var rec Record
		if !Decode(1, &got[0], &rec) || rec.Status != StatusOK || !rec.ICRCOK || rec.P.Opcode() != bth.OpSendOnly {
			t.Errorf("%s: not decoded as a valid SEND_ONLY (%v)", c.name, rec.Err)
		}
	}
	// An unknown link type: the frame is skipped with an error, reading
	// goes on.
	rd, err := NewReader(bytes.NewReader(pcapFile(binary.LittleEndian, false, 147, eth, eth)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if f, err := rd.Next(); !errors.Is(err, ErrLinkType) || f.Data != nil {
			t.Errorf("link type 147: %v", err)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Errorf("after the frames: %v", err)
	}
}

// TestReaderDamage cuts and corrupts files: errors, never a panic or a
// huge allocation.
func TestReaderDamage(t *testing.T) {
	r := newRig(t)
	frames := flat(r.send(2000, 1024), [][]byte{r.ack(0, bth.ACKSyndrome(31), 1)})
	for _, path := range []string{pcaptest.WritePcap(t, pcaptest.Frames(frames...)), pcaptest.WritePcapng(t, pcaptest.Frames(frames...))} {
		data, _ := os.ReadFile(path)
		for cut := 0; cut < len(data); cut++ {
			got, err := readAll(t, data[:cut])
			if err == nil && len(got) == len(frames) {
				t.Fatalf("%s cut at %d of %d: all frames read", path, cut, len(data))
			}
		}
		// A record claiming 4 GiB.
		bad := bytes.Clone(data)
		if path[len(path)-1] == 'p' { // .pcap
			binary.LittleEndian.PutUint32(bad[24+8:], 0xfffffff0)
		} else {
			// First block after the section and interface blocks: its length.
			off := int(binary.LittleEndian.Uint32(bad[4:]))
			off += int(binary.LittleEndian.Uint32(bad[off+4:]))
			binary.LittleEndian.PutUint32(bad[off+4:], 0xfffffff0)
		}
		if _, err := readAll(t, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: 4 GiB record: %v", path, err)
		}
	}
	if _, err := readAll(t, []byte("GIF89a and other things")); !errors.Is(err, ErrFormat) {
		t.Errorf("not a capture: %v", err)
	}
	if _, err := readAll(t, nil); !errors.Is(err, ErrFormat) {
		t.Errorf("empty file: %v", err)
	}
}

// TestReaderDamagedClaims reads files whose headers claim 256 MiB
// packets: an error, and no allocation of the claimed length.
func TestReaderDamagedClaims(t *testing.T) {
	for _, c := range damagedCaptures(t) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n, err := readOwn(c.data)
		runtime.ReadMemStats(&after)
		if c.name == "pcap-snaplen-256MiB" {
			// A large snap length alone is no damage.
			if err != nil || n != 1 {
				t.Errorf("%s: %d packets, %v", c.name, n, err)
			}
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrCutShort) {
			t.Errorf("%s: %d packets, then %v; want a corrupt or cut file", c.name, n, err)
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
			t.Errorf("%s: %d bytes allocated", c.name, a)
		}
	}
}
