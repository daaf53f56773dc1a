package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
)

// capture writes a pcap of RC SENDs from 192.0.2.2 to 192.0.2.1 with the
// given PSNs; corrupt flips a payload bit of the first packet.
func capture(t *testing.T, psns []bth.PSN, corrupt bool) string {
	t.Helper()
	frames := make([][]byte, len(psns))
	for i, psn := range psns {
		h := bth.Headers{L2L3: bth.L2L3{SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1"), SrcPort: 49441},
			BTH: bth.BTHFields{Opcode: bth.OpSendOnly, PKey: 0xffff, DestQP: 0x11, PSN: psn, AckReq: true}}
		buf := make([]byte, h.FrameLen(32))
		if _, err := bth.Encode(buf, &h, bytes.Repeat([]byte{7}, 32)); err != nil {
			t.Fatal(err)
		}
		if corrupt && i == 0 {
			buf[len(buf)-8] ^= 0x20
		}
		frames[i] = buf
	}
	return pcaptest.WritePcap(t, pcaptest.Frames(frames...))
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return l[len(l)-1]
}

func TestPcapVerify(t *testing.T) {
	clean := capture(t, []bth.PSN{1, 2, 3}, false)
	gap := capture(t, []bth.PSN{1, 2, 5}, false)
	bad := capture(t, []bth.PSN{1, 2, 3}, true)
	for _, c := range []struct {
		args []string
		code int
		last string
		has  string
	}{
		{[]string{"pcap", "verify", clean}, 0, "3 packets, 3 roce, 3 icrc_ok, 0 icrc_bad, 0 malformed", ""},
		{[]string{"pcap", "verify", gap}, 0, "3 packets, 3 roce, 3 icrc_ok, 0 icrc_bad, 0 malformed", "psn gap: expected 0x000003, got 0x000005 (2 missing)"},
		{[]string{"pcap", "verify", gap, "--strict"}, 1, "3 packets, 3 roce, 3 icrc_ok, 0 icrc_bad, 0 malformed", "psn_gap"},
		{[]string{"pcap", "verify", "--strict", "-q", clean}, 0, "3 packets, 3 roce, 3 icrc_ok, 0 icrc_bad, 0 malformed", ""},
		{[]string{"pcap", "verify", bad}, 1, "3 packets, 3 roce, 2 icrc_ok, 1 icrc_bad, 0 malformed", ":1: error: icrc"},
		{[]string{"pcap", "verify", clean, bad}, 1, "6 packets, 6 roce, 5 icrc_ok, 1 icrc_bad, 0 malformed", clean + ": 3 packets"},
		{[]string{"pcap", "verify", "--", clean}, 0, "3 packets, 3 roce, 3 icrc_ok, 0 icrc_bad, 0 malformed", ""},
	} {
		code, out, errOut := runArgs(c.args...)
		if code != c.code || lastLine(out) != c.last || !strings.Contains(out, c.has) {
			t.Errorf("%v: exit %d (want %d)\n%s%s", c.args[2:], code, c.code, out, errOut)
		}
	}
	code, out, _ := runArgs("pcap", "verify", "--json", bad)
	var sum map[string]any
	if err := json.Unmarshal([]byte(lastLine(out)), &sum); code != 1 || err != nil || sum["icrc_bad"] != 1.0 {
		t.Errorf("--json: exit %d, %v, %q", code, err, out)
	}
}

func TestPcapDecode(t *testing.T) {
	path := capture(t, []bth.PSN{0xffffff, 0}, false)
	code, out, _ := runArgs("pcap", "decode", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "1 192.0.2.2:49441 > 192.0.2.1:4791 RC_SEND_ONLY psn=0xffffff qp=0x000011 A=1") ||
		!strings.HasSuffix(lines[1], " ok") {
		t.Errorf("decode: exit %d\n%s", code, out)
	}
	code, out, _ = runArgs("pcap", "decode", path, "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.Split(out, "\n")[1]), &m); code != 0 || err != nil || m["psn"] != 0.0 || m["frame"] != 2.0 || m["icrc_ok"] != true {
		t.Errorf("decode --json: exit %d, %v\n%s", code, err, out)
	}
}

func TestPcapUsage(t *testing.T) {
	for _, args := range [][]string{
		{"pcap"},
		{"pcap", "verify"},
		{"pcap", "decode", "--strict", "x.pcap"}, // --strict belongs to verify
		{"pcap", "convert", "x.pcap"},
		{"pcap", "verify", filepath.Join(t.TempDir(), "missing.pcap")},
	} {
		if code, _, errOut := runArgs(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, out, _ := runArgs("pcap", "help"); code != 0 || !strings.Contains(out, "uroce pcap verify [--json] [--strict]") {
		t.Errorf("pcap help: exit %d", code)
	}
}
