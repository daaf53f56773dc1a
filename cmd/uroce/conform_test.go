package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConformSelf: uroce conform --self runs the catalogue, prints one
// line per scenario and passes (exit 0); a scenario that fails makes it
// exit 1 and writes that scenario's capture; a scenario file of the
// user's runs too.
func TestConformSelf(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runArgs("conform", "--self", "-w", dir)
	if code != 0 || !strings.Contains(out, "gap-requests-dropped     PASS") || !strings.Contains(out, "duplicate-write          PASS") ||
		!strings.Contains(out, " 0 failed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.pcap")); len(m) != 0 {
		t.Errorf("captures written for passing scenarios: %v", m)
	}
	wrong := filepath.Join(dir, "wrong.txt")
	os.WriteFile(wrong, []byte("scenario wrong\nrule a READ of fresh memory reads ones\nibta 9.4\nsend read_request psn=0 va=0 len=4\nexpect read_response_only psn=0 data=01010101\n"), 0o644)
	if code, out, errOut := runArgs("conform", "--self", "-w", dir, wrong); code != 1 || !strings.Contains(out, "wrong  ") || !strings.Contains(out, "FAIL") {
		t.Fatalf("a failing scenario: exit %d\n%s%s", code, out, errOut)
	}
	if code, v, _ := runArgs("pcap", "verify", "-q", filepath.Join(dir, "wrong.pcap")); code != 0 {
		t.Fatalf("the failing scenario's capture: %s", v)
	}
	if code, out, _ := runArgs("conform", "--self", "--keep-past-gap", "-k", "^gap-requests-dropped$"); code != 1 || !strings.Contains(out, "gap-requests-dropped     FAIL") {
		t.Fatalf("--keep-past-gap: exit %d\n%s", code, out)
	}
	if code, _, errOut := runArgs("conform", "--keep-past-gap", "-d", "veth9", "--perftest", "ib_write_bw", "192.0.2.1"); code != 2 || !strings.Contains(errOut, "--keep-past-gap is for --self") {
		t.Fatalf("--keep-past-gap with a live peer: exit %d: %s", code, errOut)
	}
	mine := filepath.Join(dir, "mine.txt")
	os.WriteFile(mine, []byte("scenario mine\nrule a READ of fresh memory reads zeros\nibta 9.4\nsend read_request psn=0 va=0 len=16\nexpect read_response_only psn=0 data=00000000000000000000000000000000\n"), 0o644)
	if code, out, errOut := runArgs("conform", "--json", mine); code != 0 || !strings.Contains(out, `"name":"mine","rule"`) || !strings.Contains(out, `"pass":true`) {
		t.Fatalf("a user's scenario: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runArgs("conform", "-k", "^rnr$", "--list"); code != 0 || !strings.HasPrefix(out, "rnr ") {
		t.Fatalf("--list: exit %d: %s", code, out)
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("scenario x\nrule y\nsend nothing_at_all\n"), 0o644)
	if code, _, errOut := runArgs("conform", bad); code != 2 || !strings.Contains(errOut, "bad.txt:3") {
		t.Fatalf("a bad scenario file: exit %d: %s", code, errOut)
	}
}

// TestConformServe: --serve needs an interface; it skips, with the
// reason and without waiting for a client, the scenarios where the peer
// is the responder, those no stock client can make, and those another
// tool's client makes than --perftest names.
func TestConformServe(t *testing.T) {
	if code, _, errOut := runArgs("conform", "--serve"); code != 2 || !strings.Contains(errOut, "--serve needs -d IFACE") {
		t.Fatalf("--serve without -d: exit %d: %s", code, errOut)
	}
	code, out, errOut := runArgs("conform", "-d", "lo", "--serve", "--perftest", "ib_read_bw", "-k", "^(write-ack|requester-implied-ack|requester-rnr-retry)$")
	if code != 0 || !strings.Contains(out, "the peer is the responder in this scenario") ||
		!strings.Contains(out, "the peer posts a WRITE and a READ request on one QP") ||
		!strings.Contains(out, "its peer runs ib_send_bw, not ib_read_bw") || !strings.Contains(out, "3 scenarios, 0 passed, 0 failed, 3 skipped") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// TestParsePeerRegion: conform_peer's region message, and what is
// refused.
func TestParsePeerRegion(t *testing.T) {
	msg := func(s string) []byte {
		b := make([]byte, peerRegionSize)
		copy(b, s)
		return b
	}
	k, v, l, err := parsePeerRegion(msg("00001a2b:00007f0012345000:00010000"))
	if err != nil || k != 0x1a2b || v != 0x7f0012345000 || l != 0x10000 {
		t.Errorf("got %#x %#x %d %v", k, v, l, err)
	}
	for _, bad := range [][]byte{
		msg("1a2b:00007f0012345000:00010000"),
		msg("00001a2b:00007f0012345000:00000000"),
		msg("00001a2b:00007f001234500g:00010000"),
		msg("00001a2b-00007f0012345000-00010000"),
		[]byte("00001a2b:00007f0012345000:00010000"), // no NUL: 34 bytes
	} {
		if _, _, _, err := parsePeerRegion(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}
