package pcaptool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
)

// benchCapture returns a pcap of 1000 RoCE frames: SENDs of 3000 bytes
// at MTU 1024, their ACKs, and READs with their responses.
func benchCapture(b *testing.B) ([]byte, int) {
	r := newRig(b)
	var frames [][]byte
	for len(frames) < 1000 {
		frames = append(frames, r.send(3000, 1024)...)
		r.msn++
		frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), r.msn))
		req, resp := r.read(2000, 1024)
		frames = append(frames, req)
		frames = append(frames, resp...)
	}
	frames = frames[:1000]
	data, err := os.ReadFile(pcaptest.WritePcap(b, pcaptest.Frames(frames...)))
	if err != nil {
		b.Fatal(err)
	}
	return data, len(frames)
}

func benchPass(b *testing.B, fn func(n int, f *Frame)) {
	data, n := benchCapture(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := readFrames(bytes.NewReader(data), fn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "packets/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/packet")
}

// BenchmarkDecodeJSON reads a capture and formats every packet as JSON
// (what `uroce pcap decode --json` does, minus the output).
func BenchmarkDecodeJSON(b *testing.B) {
	var rec Record
	var line []byte
	benchPass(b, func(n int, f *Frame) {
		if Decode(n, f, &rec) {
			line = rec.AppendJSON(line[:0])
			io.Discard.Write(line)
		}
	})
}

// BenchmarkDecodeText is the same with the text form.
func BenchmarkDecodeText(b *testing.B) {
	var rec Record
	var line []byte
	benchPass(b, func(n int, f *Frame) {
		if Decode(n, f, &rec) {
			line = rec.AppendText(line[:0])
			io.Discard.Write(line)
		}
	})
}

// BenchmarkVerify runs the verifier (format checks and flow tracking).
func BenchmarkVerify(b *testing.B) {
	var v *Verifier
	benchPass(b, func(n int, f *Frame) {
		if n == 1 {
			v = NewVerifier(nil)
		}
		v.Frame(n, f)
	})
	if v.Counts.Errors != 0 || v.Counts.Flow != 0 {
		b.Fatalf("errors in the bench capture: %+v", v.Counts)
	}
}

// The benchmarks below compare this package's Reader with gopacket's
// pcapgo readers, on the reference captures and on damaged files (see
// the README's dependency notes for the figures):
//
//	go test -run '^$' -bench 'Readers' -benchtime 2s ./internal/pcaptool/

// captureReader reads every packet of a capture held in memory and
// returns how many it read and the error that stopped it (nil at the
// end of the file). A panic is returned as an error.
type captureReader struct {
	name string
	read func(data []byte) (int, error)
}

var captureReaders = []captureReader{
	{"uroce", readOwn},
	{"pcapgo", func(data []byte) (int, error) { return readPcapgo(data, false) }},
	{"pcapgo-zerocopy", func(data []byte) (int, error) { return readPcapgo(data, true) }},
}

func readOwn(data []byte) (n int, err error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	for {
		_, err := r.Next()
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil && !errors.Is(err, ErrLinkType):
			return n, err
		}
		n++
	}
}

// readPcapgo reads with pcapgo.NewReader, or for pcapng NewNgReader
// with the link type of each packet (as Reader gives it).
func readPcapgo(data []byte, zeroCopy bool) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	type source interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
		ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	var src source
	if len(data) >= 4 && binary.LittleEndian.Uint32(data) == ngSHB {
		r, err := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return 0, err
		}
		src = r
	} else {
		r, err := pcapgo.NewReader(bytes.NewReader(data))
		if err != nil {
			return 0, err
		}
		src = r
	}
	next := src.ReadPacketData
	if zeroCopy {
		next = src.ZeroCopyReadPacketData
	}
	for {
		_, _, err := next()
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil:
			return n, err
		}
		n++
	}
}

// benchReaders reads the files with each reader, and reports the time
// and allocations per packet.
func benchReaders(b *testing.B, files [][]byte) {
	for _, cr := range captureReaders {
		b.Run(cr.name, func(b *testing.B) {
			size, packets := 0, 0
			for _, f := range files {
				n, err := cr.read(f)
				if err != nil {
					b.Fatalf("%s: %v", cr.name, err)
				}
				size, packets = size+len(f), packets+n
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				for _, f := range files {
					cr.read(f)
				}
			}
			runtime.ReadMemStats(&after)
			all := float64(packets * b.N)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/all, "ns/packet")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/all, "allocs/packet")
		})
	}
}

// BenchmarkReadersShared reads the reference captures (../shared/pcaps).
func BenchmarkReadersShared(b *testing.B) {
	var files [][]byte
	for _, path := range sharedFiles(b) {
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, data)
	}
	benchReaders(b, files)
}

// BenchmarkReadersPcapng reads the bench capture's 1000 frames as
// pcapng.
func BenchmarkReadersPcapng(b *testing.B) {
	data, _ := benchCapture(b)
	var frames [][]byte
	if err := readFrames(bytes.NewReader(data), func(_ int, f *Frame) { frames = append(frames, bytes.Clone(f.Data)) }); err != nil {
		b.Fatal(err)
	}
	ng, err := os.ReadFile(pcaptest.WritePcapng(b, pcaptest.Frames(frames...)))
	if err != nil {
		b.Fatal(err)
	}
	benchReaders(b, [][]byte{ng})
}

// damagedCaptures are files of a few hundred bytes that claim a large
// packet (256 MiB, where the fields allow 4 GiB), which a reader must
// not allocate before it has the bytes, and other damage. All but the
// first, whose only oddity is its snap length, are to be refused.
func damagedCaptures(tb testing.TB) []struct {
	name string
	data []byte
} {
	r := newRig(tb)
	le := binary.LittleEndian
	frame := r.send(8, 1024)[0]
	const claim = 256 << 20
	// A pcap file header saying packets are up to claim bytes long,
	// then one small packet.
	snaplen := pcapFile(le, false, LinkEthernet, frame)
	le.PutUint32(snaplen[16:], claim)
	// The same with a record claiming claim bytes.
	record := bytes.Clone(snaplen)
	le.PutUint32(record[24+8:], claim)
	le.PutUint32(record[24+12:], claim)
	// A pcapng packet block claiming claim bytes.
	epb := ngPacket(le, 0, frame, claim)
	le.PutUint32(epb[8+12:], claim)
	ng := slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 0, -1), epb)
	// A pcapng packet block claiming a block of claim bytes.
	blk := ngPacket(le, 0, frame, len(frame))
	le.PutUint32(blk[4:], claim)
	ngBlk := slices.Concat(ngSection(le), ngInterface(le, LinkEthernet, 0, -1), blk)
	// Random bytes after a valid pcapng section header.
	garbage := make([]byte, 4096)
	rand.NewChaCha8([32]byte{1}).Read(garbage)
	return []struct {
		name string
		data []byte
	}{
		{"pcap-snaplen-256MiB", snaplen},
		{"pcap-record-256MiB", record},
		{"pcapng-caplen-256MiB", ng},
		{"pcapng-blocklen-256MiB", ngBlk},
		{"pcapng-garbage", append(ngSection(le), garbage...)},
		{"pcap-cut", pcapFile(le, false, LinkEthernet, frame, frame)[:24+16+len(frame)+20]},
	}
}

// BenchmarkReadersDamaged reads damaged files and reports the bytes
// allocated per file (B/op) and how each reader ends (in the log).
func BenchmarkReadersDamaged(b *testing.B) {
	for _, c := range damagedCaptures(b) {
		b.Run(c.name, func(b *testing.B) {
			for _, cr := range captureReaders {
				b.Run(cr.name, func(b *testing.B) {
					n, err := cr.read(c.data)
					b.Logf("%d packets, then %v", n, err)
					b.ReportAllocs()
					for b.Loop() {
						cr.read(c.data)
					}
				})
			}
		})
	}
}
