package bth

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
)

// sharedPcaps returns the reference captures beside the repository, or
// skips the test when they are absent.
func sharedPcaps(t *testing.T) []string {
	return pcaptest.Shared(t, filepath.Join("..", "..", "shared", "pcaps"), false)
}

func readFrames(t *testing.T, path string) [][]byte { return pcaptest.ReadFrames(t, path) }

// TestSharedPcapsICRC checks every RoCE packet of the reference captures:
// it parses, its ICRC verifies with the fast and the naive code (except in
// the sniffer captures whose source port was rewritten), and decoding
// then encoding gives the same bytes.
func TestSharedPcapsICRC(t *testing.T) {
	var total, ok, bad, trunc int
	for _, path := range sharedPcaps(t) {
		rewritten := strings.Contains(path, "rdma-ping") && !strings.Contains(path, "sport-fixed")
		for i, fr := range readFrames(t, path) {
			var p Packet
			err := Parse(fr, &p)
			if errors.Is(err, ErrNotRoCE) {
				continue
			}
			if errors.Is(err, ErrTruncated) {
				trunc++
				continue
			}
			total++
			if err != nil && !errors.Is(err, ErrBadOpcode) {
				t.Errorf("%s frame %d: %v", filepath.Base(path), i+1, err)
				continue
			}
			fast := p.ComputeICRC()
			naive := NaiveICRC(fr[p.L3:p.End-ICRCLen], p.Version == 1)
			if fast != naive {
				t.Errorf("%s frame %d: fast icrc %08x != naive %08x", filepath.Base(path), i+1, fast, naive)
			}
			if fast == p.ICRC() {
				ok++
				if rewritten {
					t.Errorf("%s frame %d: icrc verifies though the source port was rewritten", filepath.Base(path), i+1)
				}
			} else {
				bad++
				if !rewritten {
					t.Errorf("%s frame %d (%v): icrc %08x, computed %08x", filepath.Base(path), i+1, p.Opcode(), p.ICRC(), fast)
				}
			}
			// ConnectX DC packets (RD opcodes with a DCETH) round-trip too.
			if err == nil && fast == p.ICRC() {
				var h Headers
				p.Headers(&h)
				buf := make([]byte, len(fr)+64)
				n, err := Encode(buf, &h, p.Payload())
				if err != nil {
					t.Fatalf("%s frame %d: encode: %v", filepath.Base(path), i+1, err)
				}
				if string(buf[:n]) != string(fr[:p.End]) {
					d := 0
					for d < n && buf[d] == fr[d] {
						d++
					}
					t.Errorf("%s frame %d (%v): re-encoded frame differs at byte %d (bth at %d)", filepath.Base(path), i+1, p.Opcode(), d, p.BTHOff)
				}
			}
		}
	}
	t.Logf("%d roce packets: %d icrc ok, %d bad (rewritten ports), %d truncated", total, ok, bad, trunc)
	if total == 0 {
		t.Fatal("no roce packets found")
	}
}
