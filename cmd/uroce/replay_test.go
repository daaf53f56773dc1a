package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/replay"
)

const sendLat = "../../pcaps/rxe-6.1/send_lat-uroce_client.pcap"

// TestReplaySelf: uroce replay --self of a reference capture agrees (exit
// 0), writes a capture of the replay that verifies, and a fault on
// purpose makes it differ (exit 1), in text and in JSON.
func TestReplaySelf(t *testing.T) {
	out := filepath.Join(t.TempDir(), "replay.pcap")
	code, stdout, stderr := runArgs("replay", "--self", "-w", out, sendLat)
	if code != 0 || !strings.Contains(stdout, "the live peer agrees with the recording") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if code, v, _ := runArgs("pcap", "verify", "-q", out); code != 0 || !strings.Contains(v, "0 icrc_bad") {
		t.Fatalf("the replay's capture: exit %d: %s", code, v)
	}
	// The first SEND lost: the live peer NAKs the second (PSN sequence
	// error), and the report says so.
	code, stdout, _ = runArgs("replay", "--self", "--timeout", "200ms", "--drop", "1", "--json", sendLat)
	if code != 1 {
		t.Fatalf("a dropped packet: exit %d\n%s", code, stdout)
	}
	var r struct {
		Agree       bool
		Dropped     int
		Differences map[string]int
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Agree || r.Dropped != 1 || r.Differences["syndrome"] == 0 {
		t.Fatalf("a dropped packet: %+v", r)
	}
}

// TestReplayUsage: bad usage and captures without a conversation exit 2
// with a message.
func TestReplayUsage(t *testing.T) {
	noRoCE := capture(t, []bth.PSN{1}, true) // its only packet has a bad ICRC
	for _, args := range [][]string{
		{"replay"},
		{"replay", "--self", filepath.Join(t.TempDir(), "missing.pcap")},
		{"replay", sendLat}, // no peer
		{"replay", "--self", "--pace", "slow", sendLat},
		{"replay", "--self", "--drop", "0", sendLat},
		{"replay", "--self", "--delay", "3", sendLat},
		{"replay", "--self", "--qpn", "0x99", sendLat},
		{"replay", "--self", noRoCE},
	} {
		if code, _, errOut := runArgs(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, out, _ := runArgs("replay", "--list", sendLat); code != 0 || !strings.Contains(out, "RC: 192.0.2.3 qp 0x11 <-> 192.0.2.1 qp 0x1d") {
		t.Errorf("--list: exit %d: %s", code, out)
	}
}

// TestReplayAdvertsList: --list names the conversations whose SENDs
// carry buffers (skipped without the shared captures).
func TestReplayAdvertsList(t *testing.T) {
	for file, want := range map[string]string{
		"rping.pcap":       "RC: 192.0.2.2 qp 0x12 <-> 192.0.2.1 qp 0x11, 36 packets (18 and 18), buffers named in rping SENDs",
		"write_bw_cm.pcap": "RC: 192.0.2.2 qp 0x11 <-> 192.0.2.1 qp 0x11, 64 packets (32 and 32), buffers named in perftest SENDs",
	} {
		path := filepath.Join("..", "..", "..", "shared", "pcaps", "rxe-6.1", file)
		if _, err := os.Stat(path); err != nil {
			t.Skipf("no reference captures: %v", err)
		}
		if code, out, _ := runArgs("replay", "--list", path); code != 0 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d: %s", file, code, out)
		}
	}
	// perftest -R's listening end (the server of two connections) is
	// refused before any device is opened.
	path := filepath.Join("..", "..", "..", "shared", "pcaps", "rxe-6.1", "write_bw_cm.pcap")
	code, _, errOut := runArgs("replay", "-d", "nosuch0", "--rdma-cm", "18515", "--qpn", "0x12", "--side", "b", path, "192.0.2.1")
	if code != 2 || !strings.Contains(errOut, "the listening end of several conversations (2") {
		t.Errorf("the listening end of perftest -R: exit %d: %s", code, errOut)
	}
}

// TestSRQParts: ibv_srq_pingpong's conversations are played together, in
// the order of the client's QPNs (its address messages' order); --srq
// needs --pingpong.
func TestSRQParts(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "pcaps", "rxe-6.1", "srq_pingpong-uroce_client.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	convs, _, err := replay.Load(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := convs[0]
	me := 0
	if c.Ends[1].IP.String() == "192.0.2.3" {
		me = 1
	}
	parts := srqParts(convs, c, me)
	if len(parts) != 2 {
		t.Fatalf("%d conversations, want 2", len(parts))
	}
	var qpns []uint32
	for _, p := range parts {
		for _, e := range p.Ends {
			if e.IP.String() == "192.0.2.3" {
				qpns = append(qpns, e.QPN)
			}
		}
	}
	if len(qpns) != 2 || qpns[0] != 0x11 || qpns[1] != 0x12 {
		t.Errorf("the client's QPNs in order: %#x, want 0x11 0x12", qpns)
	}
	if code, _, errOut := runArgs("replay", "-d", "nosuch0", "--srq", "--dest-qpn", "5", sendLat, "192.0.2.1"); code != 2 || !strings.Contains(errOut, "--srq goes with --pingpong") {
		t.Errorf("--srq without --pingpong: exit %d: %s", code, errOut)
	}
}
