// Package pcaptest writes capture files of crafted frames for tests:
// classic pcap and pcapng, Ethernet link type, the frames one millisecond
// apart from 2025-01-02 03:04:05 UTC.
package pcaptest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Frame is one frame of a capture.
type Frame struct {
	Data []byte
	// OrigLen is the frame's length on the wire when Data is only its
	// start, as a capture with a short snap length holds it (0: len(Data)).
	OrigLen int
}

// Frames returns whole frames.
func Frames(data ...[]byte) []Frame {
	out := make([]Frame, len(data))
	for i, d := range data {
		out[i] = Frame{Data: d}
	}
	return out
}

// Start is the time of the first frame.
var Start = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// packetWriter is what pcapgo's two writers share.
type packetWriter interface {
	WritePacket(ci gopacket.CaptureInfo, data []byte) error
}

// WritePcap writes frames as a classic pcap file in a temporary directory
// of tb and returns its path.
func WritePcap(tb testing.TB, frames []Frame) string {
	tb.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		tb.Fatal(err)
	}
	writeFrames(tb, w, frames)
	return writeFile(tb, "crafted.pcap", b.Bytes())
}

// WritePcapng writes frames as a pcapng file in a temporary directory of
// tb and returns its path.
func WritePcapng(tb testing.TB, frames []Frame) string {
	tb.Helper()
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriter(&b, layers.LinkTypeEthernet)
	if err != nil {
		tb.Fatal(err)
	}
	writeFrames(tb, w, frames)
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return writeFile(tb, "crafted.pcapng", b.Bytes())
}

func writeFrames(tb testing.TB, w packetWriter, frames []Frame) {
	tb.Helper()
	for i, f := range frames {
		orig := f.OrigLen
		if orig == 0 {
			orig = len(f.Data)
		}
		ci := gopacket.CaptureInfo{Timestamp: Start.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(f.Data), Length: orig}
		if err := w.WritePacket(ci, f.Data); err != nil {
			tb.Fatal(err)
		}
	}
}

func writeFile(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Shared lists the capture files (.pcap, and .pcapng unless pcapOnly)
// below dir, sorted, or skips the test when there are none: the
// reference captures beside the repository are data, not part of it.
func Shared(t testing.TB, dir string, pcapOnly bool) []string {
	t.Helper()
	var files []string
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && (strings.HasSuffix(path, ".pcap") || !pcapOnly && strings.HasSuffix(path, ".pcapng")) {
			files = append(files, path)
		}
		return nil
	})
	if len(files) == 0 {
		t.Skipf("no reference captures in %s", dir)
	}
	sort.Strings(files)
	return files
}

// ReadFrames returns copies of the frames of the classic pcap file at
// path, failing the test on a damaged one.
func ReadFrames(t testing.TB, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var frames [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		frames = append(frames, bytes.Clone(data))
	}
}
