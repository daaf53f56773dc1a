package pcaptool

import (
	"bytes"
	"io"
	"os"
	"testing"

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
