package pcaptool

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
	"github.com/uroce/uroce/pfc"
)

var summaryRE = regexp.MustCompile(`^(\d+) packets, (\d+) roce, (\d+) icrc_ok, (\d+) icrc_bad, (\d+) malformed$`)

// verify runs RunVerify and returns its exit code, output lines and the
// last line.
func verify(t *testing.T, opt VerifyOptions, paths ...string) (int, []string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := RunVerify(&out, &errOut, paths, opt)
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	if !opt.JSON && !summaryRE.MatchString(last) {
		t.Fatalf("last line %q is not a summary", last)
	}
	return code, lines, last
}

// findings returns the output lines with the given check.
func findings(lines []string, check string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, ": "+check+": ") {
			out = append(out, l)
		}
	}
	return out
}

// cleanExchange is a correct RC exchange across the PSN wrap: three SENDs
// (one of three packets), each acknowledged, and a READ of 3000 bytes at
// MTU 1024.
func cleanExchange(r *rig) [][]byte {
	var out [][]byte
	s1 := r.send(64, 1024)
	out = append(out, s1...)
	out = append(out, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1))
	s2 := r.send(2500, 1024)
	out = append(out, s2...)
	out = append(out, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 2))
	r.msn = 2
	req, resp := r.read(3000, 1024)
	out = append(out, req)
	out = append(out, resp...)
	s3 := r.send(13, 1024) // padded
	out = append(out, s3...)
	out = append(out, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 4))
	return out
}

func TestVerifyClean(t *testing.T) {
	frames := cleanExchange(newRig(t))
	for _, path := range []string{pcaptest.WritePcap(t, pcaptest.Frames(frames...)), pcaptest.WritePcapng(t, pcaptest.Frames(frames...))} {
		code, lines, last := verify(t, VerifyOptions{Strict: true}, path)
		if code != ExitOK || len(lines) != 1 {
			t.Errorf("%s: exit %d, output:\n%s", filepath.Ext(path), code, strings.Join(lines, "\n"))
		}
		want := itoa(len(frames)) + " packets, " + itoa(len(frames)) + " roce, " + itoa(len(frames)) + " icrc_ok, 0 icrc_bad, 0 malformed"
		if last != want {
			t.Errorf("summary %q, want %q", last, want)
		}
	}
}

var itoa = strconv.Itoa

func TestVerifyCorruptPayload(t *testing.T) {
	frames := cleanExchange(newRig(t))
	bad := bytes.Clone(frames[0])
	bad[len(bad)-10] ^= 0x01 // a payload bit
	frames[0] = bad
	code, lines, last := verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if code != ExitFound {
		t.Errorf("exit %d, want 1", code)
	}
	if m := summaryRE.FindStringSubmatch(last); m[4] != "1" || m[5] != "0" {
		t.Errorf("summary %q", last)
	}
	if f := findings(lines, "icrc"); len(f) != 1 || !strings.Contains(f[0], ":1: error: icrc: stored") {
		t.Errorf("icrc findings %q", f)
	}
}

func TestVerifyTruncated(t *testing.T) {
	frames := cleanExchange(newRig(t))
	ps := pcaptest.Frames(frames...)
	// The 2500-byte SEND's first packet, cut by a 128-byte snap length.
	ps[2] = pcaptest.Frame{Data: frames[2][:128], OrigLen: len(frames[2])}
	code, lines, last := verify(t, VerifyOptions{Strict: true}, pcaptest.WritePcap(t, ps))
	if code != ExitOK {
		t.Errorf("exit %d: %s", code, strings.Join(lines, "\n"))
	}
	n := len(frames)
	if want := itoa(n) + " packets, " + itoa(n) + " roce, " + itoa(n-1) + " icrc_ok, 0 icrc_bad, 0 malformed"; last != want {
		t.Errorf("summary %q, want %q", last, want)
	}
	if f := findings(lines, "truncated"); len(f) != 1 || !strings.Contains(f[0], ":3: note: truncated: captured 128 of ") {
		t.Errorf("truncated findings %q", f)
	}
	if len(findings(lines, "psn_gap")) != 0 {
		t.Error("a truncated packet broke the PSN flow")
	}
	if len(lines) < 2 || lines[len(lines)-2] != "(1 truncated)" {
		t.Errorf("no extra counts line in %q", lines)
	}
}

func TestVerifyPSNGap(t *testing.T) {
	r := newRig(t)
	frames := cleanExchange(r)
	frames = append(frames[:3], frames[4:]...) // drop the 2500-byte SEND's middle packet
	path := pcaptest.WritePcap(t, pcaptest.Frames(frames...))
	code, lines, _ := verify(t, VerifyOptions{}, path)
	if code != ExitOK {
		t.Errorf("exit %d without --strict", code)
	}
	gaps := findings(lines, "psn_gap")
	if len(gaps) != 1 || !strings.Contains(gaps[0], ":4: flow: psn_gap: 192.0.2.2 > 192.0.2.1 qp 0x000012: psn gap: expected 0xffffff, got 0x000000 (1 missing)") {
		t.Errorf("gap findings %q", gaps)
	}
	if code, _, _ := verify(t, VerifyOptions{Strict: true}, path); code != ExitFound {
		t.Errorf("exit %d with --strict, want 1", code)
	}
}

func TestVerifyNAKRetransmissionDuplicate(t *testing.T) {
	r := newRig(t)
	var frames [][]byte
	s1 := r.send(64, 1024)
	frames = append(frames, s1...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1))
	p2 := r.psn
	s2 := r.send(64, 1024)
	s3 := r.send(64, 1024)
	// s2 is lost, s3 arrives, the responder NAKs with a sequence error,
	// the requester goes back to s2.
	frames = append(frames, s3...)
	frames = append(frames, r.ack(p2, bth.NAKSyndrome(bth.NAKPSNSequenceError), 1))
	r.psn = p2
	frames = append(frames, r.send(64, 1024)...)
	frames = append(frames, r.send(64, 1024)...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 3))
	// An RNR NAK, then the same packet twice (a duplicate).
	s4 := r.send(64, 1024)
	frames = append(frames, s4...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.RNRSyndrome(14), 3))
	frames = append(frames, s4[0], s4[0])
	frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 4))
	_ = s2

	code, lines, _ := verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if code != ExitOK {
		t.Errorf("exit %d", code)
	}
	checks := map[string]string{
		"psn_gap":        "psn gap: expected 0xfffffe, got 0xffffff (1 missing)",
		"nak":            "nak psn_sequence_error (code 0) at psn 0xfffffe, msn 1",
		"retransmission": "retransmission from psn 0xfffffe (expected 0x000000, 2 back, after a nak)",
		"rnr_nak":        "rnr nak at psn 0x000000: retry after timer code 14 (1.28 ms), msn 3",
		"duplicate":      "duplicate of frame",
	}
	for check, want := range checks {
		f := findings(lines, check)
		if len(f) == 0 || !strings.Contains(f[0], want) {
			t.Errorf("%s: %q, want %q", check, f, want)
		}
	}
	if f := findings(lines, "msn"); len(f) != 0 {
		t.Errorf("msn findings on a correct flow: %q", f)
	}
}

func TestVerifyReadResponses(t *testing.T) {
	// A READ of 3000 bytes at MTU 1024 answered with only two packets.
	r := newRig(t)
	req, resp := r.read(3000, 1024)
	frames := append([][]byte{req}, resp[0], resp[2])
	frames = append(frames, r.send(64, 1024)...)
	_, lines, _ := verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if f := findings(lines, "read_response"); len(f) == 0 || !strings.Contains(f[0], "RC_RDMA_READ_RESPONSE_LAST at psn 0xffffff, expected psn 0xfffffe") {
		t.Errorf("read findings %q", f)
	}

	// The responder sends 2048 bytes where the request asked for 3000.
	r = newRig(t)
	req, _ = r.read(3000, 1024)
	r2 := newRig(t)
	_, short := r2.read(2048, 1024)
	_, lines, _ = verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(append([][]byte{req}, short...)...)))
	if f := findings(lines, "read_response"); len(f) == 0 || !strings.Contains(f[0], "asked for 3000 bytes and got 2048") {
		t.Errorf("short read findings %q", f)
	}

	// A READ whose responses are not seen: the next request's PSN says
	// how many PSNs it took, which fits MTU 1024 only (3000 bytes in 3).
	r = newRig(t)
	req, _ = r.read(3000, 1024)
	frames = append([][]byte{req}, r.send(5000, 1024)...)
	_, lines, _ = verify(t, VerifyOptions{Strict: true}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if len(lines) != 1 {
		t.Errorf("findings on a consistent read: %q", lines)
	}
	// The same with the next request one PSN too late: 4 PSNs fit no MTU.
	r = newRig(t)
	req, _ = r.read(3000, 1024)
	r.psn = r.psn.Next()
	frames = append([][]byte{req}, r.send(64, 1024)...)
	_, lines, _ = verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if f := findings(lines, "read_response"); len(f) == 0 || !strings.Contains(f[0], "4 psns fit no path mtu") {
		t.Errorf("read psn findings %q", f)
	}
}

func TestVerifyMSN(t *testing.T) {
	r := newRig(t)
	var frames [][]byte
	frames = append(frames, r.send(64, 1024)...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1))
	frames = append(frames, r.send(64, 1024)...)
	frames = append(frames, r.send(64, 1024)...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 2)) // two messages, MSN +1
	frames = append(frames, r.send(64, 1024)...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1)) // back
	_, lines, _ := verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	f := findings(lines, "msn")
	if len(f) != 2 || !strings.Contains(f[0], "msn moved from 1 to 2 while 2 messages completed") || !strings.Contains(f[1], "msn went back from 2") {
		t.Errorf("msn findings %q", f)
	}
}

func TestVerifyMalformed(t *testing.T) {
	r := newRig(t)
	good := r.send(64, 1024)[0]
	var frames [][]byte
	// A reserved opcode (0x1f) with a valid ICRC.
	frames = append(frames, r.frame(true, bth.BTHFields{Opcode: 0x1f, DestQP: 0x12}, make([]byte, 8), nil))
	// An ACK that carries a payload.
	frames = append(frames, r.frame(false, bth.BTHFields{Opcode: bth.OpAck, DestQP: 0x11}, make([]byte, 8), nil))
	// Transport version 1 and reserved bits after the A bit.
	frames = append(frames, r.frame(true, bth.BTHFields{Opcode: bth.OpSendOnly, DestQP: 0x12, TVer: 1, Resv7: 1}, make([]byte, 4), nil))
	// A UDP length that disagrees with the IP length.
	f := bytes.Clone(good)
	f[14+20+5]++
	frames = append(frames, f)
	// A reserved AETH syndrome kind.
	frames = append(frames, r.ack(0, bth.Syndrome(0x40), 0))
	// IP and UDP lengths beyond the frame: with a stale IPv4 header
	// checksum it is damage; with a matching one, a frame cut by a
	// sniffer that did not record the original length.
	for _, fix := range []bool{false, true} {
		f = bytes.Clone(good)
		f[14+3] += 4
		f[14+20+5] += 4
		if fix {
			f[14+10], f[14+11] = 0, 0
			binary.BigEndian.PutUint16(f[14+10:], ^csum(f[14:34]))
		}
		frames = append(frames, f)
	}

	code, lines, last := verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if code != ExitFound {
		t.Errorf("exit %d, want 1", code)
	}
	want := []string{
		":1: error: opcode: reserved opcode 0x1f",
		":2: error: header: RC_ACKNOWLEDGE carries 8 payload bytes",
		":3: error: reserved: bth transport version 1",
		":3: error: reserved: bth reserved bits after the ack request bit are 0x01",
		":4: error: length: udp length",
		":5: error: reserved: aeth syndrome 0x40 is of the reserved kind",
		":6: error: length: ip length 112 exceeds the frame",
		":7: note: truncated: captured 122 of 126 bytes",
	}
	out := strings.Join(lines, "\n")
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in\n%s", w, out)
		}
	}
	if m := summaryRE.FindStringSubmatch(last); m[5] != "6" || m[2] != "7" {
		t.Errorf("summary %q: want 6 malformed", last)
	}
}

func TestVerifyDamagedFile(t *testing.T) {
	frames := cleanExchange(newRig(t))
	path := pcaptest.WritePcap(t, pcaptest.Frames(frames...))
	data, _ := os.ReadFile(path)
	cut := filepath.Join(t.TempDir(), "cut.pcap")
	os.WriteFile(cut, data[:len(data)-20], 0o644)
	code, lines, last := verify(t, VerifyOptions{}, cut)
	if code != ExitFound {
		t.Errorf("exit %d for a file cut short", code)
	}
	if f := findings(lines, "file"); len(f) != 1 || !strings.Contains(f[0], "cut short") {
		t.Errorf("file findings %q", f)
	}
	if m := summaryRE.FindStringSubmatch(last); m[1] != itoa(len(frames)-1) {
		t.Errorf("summary %q", last)
	}
	var out, errOut bytes.Buffer
	if code := RunVerify(&out, &errOut, []string{filepath.Join(t.TempDir(), "absent.pcap")}, VerifyOptions{}); code != ExitUsage {
		t.Errorf("exit %d for a missing file, want 2", code)
	}
	os.WriteFile(cut, []byte("this is not a capture file"), 0o644)
	if code, _, _ := verify(t, VerifyOptions{}, cut); code != ExitFound {
		t.Errorf("exit %d for a text file", code)
	}
}

func TestVerifyJSON(t *testing.T) {
	frames := cleanExchange(newRig(t))
	frames[0] = bytes.Clone(frames[0])
	frames[0][len(frames[0])-1] ^= 0xff // the ICRC itself
	code, lines, last := verify(t, VerifyOptions{JSON: true}, pcaptest.WritePcap(t, pcaptest.Frames(frames...)))
	if code != ExitFound {
		t.Errorf("exit %d", code)
	}
	var f struct {
		Frame    int    `json:"frame"`
		Severity string `json:"severity"`
		Check    string `json:"check"`
		Message  string `json:"message"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &f); err != nil || f.Frame != 1 || f.Severity != "error" || f.Check != "icrc" {
		t.Errorf("finding %q: %v %+v", lines[0], err, f)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(last), &s); err != nil {
		t.Fatal(err)
	}
	if s["icrc_bad"] != 1.0 || s["roce"] != float64(len(frames)) || !summaryRE.MatchString(s["summary"].(string)) {
		t.Errorf("summary %v", s)
	}
}

// TestVerifySharedCaptures runs the verifier over the reference captures:
// rdma_rxe's are clean (not even a flow anomaly); the sniffer captures
// whose source port was rewritten fail on the ICRC, their fixed copies
// pass; the NCCL frames cut at 243 bytes are truncated, not ICRC errors.
func TestVerifySharedCaptures(t *testing.T) {
	var total Counts
	for _, path := range sharedFiles(t) {
		var got []*Finding
		v := NewVerifier(func(f *Finding) { got = append(got, f) })
		if err := readFile(path, v.Frame); err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		v.Finish()
		c := v.Counts
		total.Add(c)
		name := filepath.Base(path)
		rewritten := strings.Contains(path, "rdma-ping") && !strings.Contains(path, "sport-fixed")
		switch {
		case rewritten:
			if c.ICRCBad == 0 || c.ICRCOK != 0 {
				t.Errorf("%s: %d icrc ok, %d bad", name, c.ICRCOK, c.ICRCBad)
			}
		default:
			if c.Errors != 0 {
				for _, f := range got {
					if f.Severity == SevError {
						t.Errorf("%s:%d: %s: %s", name, f.Frame, f.Check, f.Message)
						break
					}
				}
			}
		}
		// Every RDMA CM exchange of the captures (rdma_rxe and ConnectX)
		// is complete and consistent, and so is the traffic after it.
		for _, f := range got {
			if strings.HasPrefix(f.Check, "cm") {
				t.Errorf("%s:%d: %s: %s", name, f.Frame, f.Check, f.Message)
			}
		}
		if strings.Contains(path, "rxe-6.1") && (c.Flow != 0 || c.Notes != 0) {
			t.Errorf("%s: %d flow anomalies, %d notes in an rxe capture", name, c.Flow, c.Notes)
		}
		if strings.Contains(name, "nccl") && (c.Truncated == 0 || c.Malformed != 0) {
			t.Errorf("%s: %d truncated, %d malformed", name, c.Truncated, c.Malformed)
		}
	}
	t.Logf("%s; %d truncated, %d flow anomalies", total.Summary(), total.Truncated, total.Flow)
	if total.ICRCOK < 4869 {
		t.Errorf("%d icrc ok, want at least the 4869 of the README", total.ICRCOK)
	}
}

// csum is the ones' complement sum of b (RFC 1071), not inverted.
func csum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// TestVerifyMACControl: PAUSE and PFC frames among RoCE packets are
// counted under their own name, are not RoCE, and break neither the
// flow checks nor the exit status (a short one included).
func TestVerifyMACControl(t *testing.T) {
	frames := cleanExchange(newRig(t))
	src := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	ctl := [][]byte{
		pfc.AppendPFC(nil, src, 0x08, [8]uint16{3: 0xffff}),
		pfc.AppendPause(nil, src, 100),
		pfc.AppendPFC(nil, src, 0x08, [8]uint16{})[:34], // too short
	}
	var mixed [][]byte
	for i, f := range frames {
		mixed = append(mixed, f)
		if i < len(ctl) {
			mixed = append(mixed, ctl[i])
		}
	}
	path := pcaptest.WritePcap(t, pcaptest.Frames(mixed...))
	code, lines, last := verify(t, VerifyOptions{Strict: true}, path)
	n := len(frames)
	want := itoa(n+3) + " packets, " + itoa(n) + " roce, " + itoa(n) + " icrc_ok, 0 icrc_bad, 0 malformed"
	if code != ExitOK || last != want || len(lines) != 2 || lines[0] != "(3 mac control frames)" {
		t.Errorf("exit %d, output:\n%s\nwant summary %q", code, strings.Join(lines, "\n"), want)
	}
	_, lines, _ = verify(t, VerifyOptions{}, path, path)
	if len(lines) != 3 || lines[0] != path+": "+want+"; 3 mac control frames" {
		t.Errorf("two files:\n%s", strings.Join(lines, "\n"))
	}
	_, _, last = verify(t, VerifyOptions{JSON: true}, path)
	var m map[string]any
	if err := json.Unmarshal([]byte(last), &m); err != nil || m["mac_control"] != 3.0 || m["roce"] != float64(n) || m["packets"] != float64(n+3) {
		t.Errorf("json %q: %v", last, err)
	}
}
