package interop

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool"
)

// creditsOnly is a replay report's difference in an ACK's credits alone,
// against rdma_rxe's 31.
var creditsOnly = regexp.MustCompile(`^syndrome credits=\d+ -> credits=31 `)

// sharedRxe is where the reference captures of rdma_rxe talking to
// itself are (../shared/pcaps beside the repository).
var sharedRxe = filepath.Join("..", "..", "..", "shared", "pcaps", "rxe-6.1")

// TestReplayRxe replays the client side of rdma_rxe's own recorded runs
// (two rxe guests, Debian's 6.1 kernel) at a live rdma_rxe guest running
// the recorded server with the recorded flags: its QP set up through the
// tool's exchange, every recorded answer must come again. A fault on
// purpose makes the same replay differ, and the report names how.
func TestReplayRxe(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(sharedRxe); err != nil {
		t.Skipf("no reference captures: %v", err)
	}
	replayStep := func(name, guest, capture string, exit int, check func(t *testing.T, out string), how ...string) step {
		args := append([]string{"replay", "--timeout", "2s"}, how...)
		return step{name: name, guest: guest, uroce: append(args, filepath.Join(sharedRxe, capture)), uroceExit: exit,
			check: func(t *testing.T, g, u string) {
				t.Helper()
				if check != nil {
					check(t, u)
				}
			}}
	}
	agrees := func(t *testing.T, out string) {
		t.Helper()
		if !strings.Contains(out, "the live peer agrees with the recording") {
			t.Errorf("replay does not agree:\n%s", out)
		}
	}
	var steps []step
	// perftest fills its buffers with random bytes at each start: the
	// data of READ responses and SENDs and the atomics' original values
	// differ from run to run, and are tolerated.
	for _, c := range []struct{ tool, flags, capture, tolerate string }{
		{"ib_write_bw", "-x 1 -n 5 -s 3000", "write_bw.pcap", ""},
		{"ib_read_bw", "-x 1 -n 5 -s 3000", "read_bw.pcap", "payload"},
		{"ib_send_bw", "-x 1 -n 5 -s 3000", "send_bw.pcap", ""},
		{"ib_atomic_bw", "-x 1 -n 5", "atomic_bw.pcap", "atomic_orig"},
		{"ib_write_lat", "-x 1 -n 5 -s 64", "write_lat.pcap", ""},
		{"ib_read_lat", "-x 1 -n 5 -s 64", "read_lat.pcap", "payload"},
		{"ib_send_lat", "-x 1 -n 5 -s 64", "send_lat.pcap", "payload"},
	} {
		how := []string{"--perftest", c.tool}
		if c.tolerate != "" {
			how = append(how, "--tolerate", c.tolerate)
		}
		steps = append(steps, replayStep("replay-"+c.capture, c.tool+" -d rxe0 "+c.flags, c.capture, 0, agrees, how...))
	}
	// ibv_srq_pingpong: its exchange of 256 address messages, both QPs'
	// conversations played at once, a report each; rxe's own run and
	// uroce's client of a run with rxe.
	twoAgree := func(t *testing.T, out string) {
		t.Helper()
		if n := strings.Count(out, "the live peer agrees with the recording"); n != 2 {
			t.Errorf("want both QPs' conversations to agree, %d do:\n%s", n, out)
		}
	}
	steps = append(steps, replayStep("replay-srq_pingpong", "ibv_srq_pingpong -d rxe0 -g 1 -n 5 -s 64 -q 2", "srq_pingpong.pcap", 0,
		twoAgree, "--pingpong", "--srq"))
	srqOwn := replayStep("replay-own-srq_pingpong-uroce_client.pcap", "ibv_srq_pingpong -d rxe0 -g 1 -c -n 4 -s 64 -q 2", "", 0,
		twoAgree, "--pingpong", "--srq")
	srqOwn.uroce[len(srqOwn.uroce)-1] = filepath.Join("..", "..", "pcaps", "rxe-6.1", "srq_pingpong-uroce_client.pcap")
	steps = append(steps, srqOwn)
	// SEND_ONLY with a pad count of 3 (13-byte messages).
	steps = append(steps, replayStep("replay-rc_pingpong_pad", "ibv_rc_pingpong -d rxe0 -g 1 -n 3 -s 13", "rc_pingpong_pad.pcap", 0, agrees, "--pingpong"))
	for _, tr := range []string{"rc", "uc", "ud"} {
		tool := "ibv_" + tr + "_pingpong"
		steps = append(steps, replayStep("replay-"+tr+"_pingpong", tool+" -d rxe0 -g 1 -n 5 -s 64", tr+"_pingpong.pcap", 0, agrees, "--pingpong"))
	}
	// The host_* captures: an independent userspace client (not a stock
	// tool) against rxe, through ibv_rc/ud_pingpong's exchange, 5
	// messages of 64 bytes each way. The recorded rxe end echoed the
	// client's bytes, where the stock pingpong server sends its own fill:
	// the SEND payloads are tolerated. host_rc_ce_csum's requests carry
	// DSCP 26, ECN CE and UDP checksums, played as recorded: rxe must
	// take them all the same.
	for _, c := range []struct{ tool, capture string }{
		{"ibv_rc_pingpong", "host_rc.pcap"},
		{"ibv_rc_pingpong", "host_rc_ce_csum.pcap"},
		{"ibv_ud_pingpong", "host_ud.pcap"},
	} {
		st := replayStep("replay-"+c.capture, c.tool+" -d rxe0 -g 1 -n 5 -s 64", c.capture, 0, agrees,
			"--pingpong", "--tolerate", "payload")
		if c.capture == "host_rc_ce_csum.pcap" {
			played := filepath.Join(t.TempDir(), "played.pcap")
			st.uroce = append(st.uroce[:1], append([]string{"-w", played}, st.uroce[1:]...)...)
			st.check = func(t *testing.T, g, u string) {
				agrees(t, u)
				checkMarked(t, played)
			}
		}
		steps = append(steps, st)
	}
	// RDMA CM: rxe's recorded ucmatose client, connected through the
	// stock ucmatose server's listener (REQ, REP, RTU), its SENDs and
	// ACKs played, the connection released.
	// ucmatose fills its messages differently at every run.
	steps = append(steps, replayStep("replay-ucmatose", "ucmatose -C 2 -S 64", "ucmatose.pcap", 0, agrees, "--rdma-cm", "7471",
		"--tolerate", "payload"))
	// Buffers named in SENDs. rping: the recorded client advertises its
	// buffers in SENDs and answers the live server's READ and WRITE to
	// them (checked: they must name what it advertised). ib_write_bw -R:
	// two connections, the exchange's and the test's, played in the
	// recorded order; the server's buffer, learnt from its advert on the
	// first, is what the WRITEs on the second name. perftest's report
	// messages at the end hold the measured figures: payload tolerated.
	steps = append(steps, replayStep("replay-rping", "rping -s -v -a "+guestAddr+" -C 3 -S 64", "rping.pcap", 0, agrees, "--rdma-cm", "7174"))
	// The listening ends of the same two: the replay listens as the
	// recorded server did, and the stock clients connect to it (the
	// guest is the client). The rping server READs the live client's
	// buffer and WRITEs it back, naming what the client advertised.
	rpingServer := replayStep("replay-rping-listen", "rping -c -v -C 3 -S 64 -p 7174 -a", "rping.pcap", 0, agrees,
		"--rdma-cm", "7174", "--side", "b")
	rpingServer.guestClient = true
	rpingServer.uroce = append(rpingServer.uroce, guestAddr)
	rpingServer.check = func(t *testing.T, g, u string) {
		agrees(t, u)
		if n := strings.Count(g, "ping data: rdma-ping-"); n != 3 {
			t.Errorf("the stock rping client printed %d pings, want 3:\n%s", n, g)
		}
	}
	steps = append(steps, rpingServer)
	cmaServer := replayStep("replay-ucmatose-listen", "ucmatose -C 2 -S 64 -s", "ucmatose.pcap", 0, agrees,
		"--rdma-cm", "7471", "--side", "a", "--tolerate", "payload")
	cmaServer.guestClient = true
	cmaServer.uroce = append(cmaServer.uroce, guestAddr)
	steps = append(steps, cmaServer)
	steps = append(steps, replayStep("replay-write_bw_cm", "ib_write_bw -d rxe0 -R -n 5 -s 3000 -F", "write_bw_cm.pcap", 0,
		func(t *testing.T, out string) {
			if n := strings.Count(out, "the live peer agrees with the recording"); n != 2 {
				t.Errorf("want both conversations to agree, %d do:\n%s", n, out)
			}
		}, "--rdma-cm", "18515", "--qpn", "0x12", "--tolerate", "payload"))
	// The project's own captures (pcaps/rxe-6.1): uroce's side of a run
	// with rxe, or rxe's side of a run with uroce, played at rxe.
	own := filepath.Join("..", "..", "pcaps", "rxe-6.1")
	for _, c := range []struct {
		guest, capture string
		how            []string
	}{
		{"ibv_rc_pingpong -d rxe0 -g 1 -c -n 3 -s 13", "rc_pingpong-uroce_client.pcap", []string{"--pingpong"}},
		{"ibv_rc_pingpong -d rxe0 -g 1 -c -n 3 -s 64", "rc_pingpong-uroce_server.pcap", []string{"--pingpong"}},
		{"ib_write_bw -d rxe0 -x 1 -F -n 5 -s 3000", "write_bw-uroce_client.pcap", []string{"--perftest", "ib_write_bw"}},
		{"ib_send_lat -d rxe0 -x 1 -F -n 5 -s 64", "send_lat-uroce_client.pcap", []string{"--perftest", "ib_send_lat", "--tolerate", "payload"}},
		{"ib_read_bw -d rxe0 -x 1 -F -n 5 -s 3000", "read_bw-uroce_server.pcap", []string{"--perftest", "ib_read_bw", "--tolerate", "payload"}},
		{"ib_atomic_bw -d rxe0 -x 1 -F -n 5", "atomic_bw-uroce_server.pcap", []string{"--perftest", "ib_atomic_bw", "--tolerate", "atomic_orig"}},
		{"ibv_ud_pingpong -d rxe0 -g 1 -c -n 3 -s 64", "ud_pingpong-uroce_server.pcap", []string{"--pingpong"}},
		// The recorded bad R_Key stays bad: the live server NAKs the
		// first WRITE with a remote access error, as uroce did.
		{"ib_write_bw -d rxe0 -x 1 -F -n 5 -s 64", "bad_rkey-uroce_target.pcap", []string{"--perftest", "ib_write_bw"}},
		// uroce's client that lost 30 % of its sends: its resends and
		// rxe's answers, duplicates included, come again.
		{"ibv_rc_pingpong -d rxe0 -g 1 -c -n 5 -s 64", "retransmit-uroce_client.pcap", []string{"--pingpong"}},
	} {
		st := replayStep("replay-own-"+c.capture, c.guest, "", 0, agrees, c.how...)
		st.uroce[len(st.uroce)-1] = filepath.Join(own, c.capture)
		if strings.HasPrefix(c.capture, "bad_rkey") {
			st.capture = func(t *testing.T, f *findings) {
				if f.naks["remote_access_error from "+guestAddr] != 1 || len(f.naks) != 1 {
					t.Errorf("the bad R_Key: want one remote access error NAK from rxe, got %s", f)
				}
			}
		}
		steps = append(steps, st)
		// The same with the played end's first packet sent twice: rxe
		// answers the copy as a duplicate (an ACK again, a READ executed
		// again, an atomic from its saved result), which the report
		// counts apart, and the replay agrees; the capture has the copy.
		dup := replayStep("replay-own-dup1-"+c.capture, c.guest, "", 0, func(t *testing.T, out string) {
			agrees(t, out)
			if !strings.Contains(out, "sent ") || !strings.Contains(out, ", 1 duplicated") {
				t.Errorf("the copy not counted:\n%s", out)
			}
		}, append(append([]string{}, c.how...), "--dup", "1")...)
		dup.uroce[len(dup.uroce)-1] = filepath.Join(own, c.capture)
		dup.capture = func(t *testing.T, f *findings) {
			if f.count("duplicate", uroceAddr) != 1 {
				t.Errorf("want the copy in the capture, got %s", f)
			}
			if st.capture != nil {
				st.capture(t, f)
			} else if len(f.naks) != 0 || len(f.by["rnr_nak"]) != 0 {
				t.Errorf("a duplicate drew a NAK: %s", f)
			}
		}
		steps = append(steps, dup)
	}
	// A ConnectX capture of a whole conversation (ib_send_bw, 5 SENDs of
	// 1 KiB, from the public captures): rxe answers every SEND, and the
	// report names the real differences only, ConnectX's ACK credits
	// (its receive queue's, where rxe's say 31), on each of the five
	// ACKs; the live ACKs come one per SEND, as the recorded ones did.
	cx := replayStep("replay-connectx-send_bw", "ib_send_bw -d rxe0 -x 1 -n 5 -s 1024", "", 1,
		func(t *testing.T, out string) {
			n := 0
			for _, l := range strings.Split(out, "\n") {
				_, d, ok := strings.Cut(l, "DIFFERS: ")
				if !ok {
					continue
				}
				n++
				if !creditsOnly.MatchString(d) {
					t.Errorf("a difference that is not ConnectX's credits: %s", l)
				}
			}
			if n != 5 || strings.Contains(out, "live: none") || !strings.Contains(out, "5 answers recorded, 0 unexpected") {
				t.Errorf("want every answer, differing in the credits only:\n%s", out)
			}
		}, "--perftest", "ib_send_bw")
	cx.uroce[len(cx.uroce)-1] = filepath.Join(sharedRxe, "..", "public", "magnate3_linux-riscv-dev__soft-roce_mellanox_doc_ib_send_bw_over_roce.pcap")
	steps = append(steps, cx)
	// rxe's SENDs to a uroce receiver that posted its receives late,
	// played at a stock ib_send_bw server, which has them posted: the
	// report names the recorded RNR NAKs that became ACKs.
	rnr := replayStep("replay-own-rnr-uroce_receiver.pcap", "ib_send_bw -d rxe0 -x 1 -F -n 5 -s 64", "", 1,
		func(t *testing.T, out string) {
			if !strings.Contains(out, "syndrome rnr") || strings.Contains(out, "live: none") {
				t.Errorf("want the recorded RNR NAKs named, each answered:\n%s", out)
			}
		}, "--perftest", "ib_send_bw", "--tolerate", "payload")
	rnr.uroce[len(rnr.uroce)-1] = filepath.Join(own, "rnr-uroce_receiver.pcap")
	rnr.capture = func(t *testing.T, f *findings) { // the recorded resends come again, all answered
		if len(f.naks) != 0 {
			t.Errorf("want no NAK from the live server (its receives are posted), got %s", f)
		}
	}
	steps = append(steps, rnr)
	// The second WRITE packet lost: rxe answers the third with a PSN
	// sequence NAK, where the recording has none.
	drop := replayStep("replay-write_bw-drop2", "ib_write_bw -d rxe0 -x 1 -n 5 -s 3000", "write_bw.pcap", 1,
		func(t *testing.T, out string) {
			if !strings.Contains(out, "syndrome credits=31 -> psn_sequence_error") || !strings.Contains(out, "1 dropped") {
				t.Errorf("the replay with a drop does not name the NAK:\n%s", out)
			}
		}, "--perftest", "ib_write_bw", "--drop", "2")
	drop.capture = func(t *testing.T, f *findings) {
		if f.naks["psn_sequence_error from "+guestAddr] != 1 || f.count("psn_gap", uroceAddr) != 1 {
			t.Errorf("a dropped packet: want one gap and one sequence NAK, got %s", f)
		}
	}
	steps = append(steps, drop)
	// The second WRITE packet sent twice: rxe acknowledges the copy, an
	// ACK the report counts apart, and every recorded answer comes.
	dup := replayStep("replay-write_bw-dup2", "ib_write_bw -d rxe0 -x 1 -n 5 -s 3000", "write_bw.pcap", 0,
		func(t *testing.T, out string) {
			agrees(t, out)
			if !strings.Contains(out, "1 duplicated, 1 answers to a duplicate") {
				t.Errorf("want the duplicate's ACK counted:\n%s", out)
			}
		}, "--perftest", "ib_write_bw", "--dup", "2")
	dup.capture = func(t *testing.T, f *findings) {
		if len(f.naks) != 0 || f.count("duplicate", uroceAddr) != 1 {
			t.Errorf("a duplicate: want it in the capture and no NAK, got %s", f)
		}
	}
	// The second sent with a bad ICRC: rxe drops it silently and NAKs
	// the third (PSN sequence error), as for a lost one.
	corrupt := replayStep("replay-write_bw-corrupt2", "ib_write_bw -d rxe0 -x 1 -n 5 -s 3000", "write_bw.pcap", 1,
		func(t *testing.T, out string) {
			if !strings.Contains(out, "syndrome credits=31 -> psn_sequence_error") || !strings.Contains(out, "1 corrupted") {
				t.Errorf("the replay with a bad ICRC does not name the NAK:\n%s", out)
			}
		}, "--perftest", "ib_write_bw", "--corrupt", "2")
	corrupt.badFrames = true
	corrupt.capture = func(t *testing.T, f *findings) {
		if f.naks["psn_sequence_error from "+guestAddr] != 1 || f.counts.ICRCBad != 1 {
			t.Errorf("a bad ICRC: want one bad frame and one sequence NAK, got %s", f)
		}
	}
	// The second sent after the third: rxe NAKs the third (the second
	// is missing), takes the second, and NAKs the fourth (the third is
	// missing now): two sequence NAKs, the played end resending nothing.
	reorder := replayStep("replay-write_bw-reorder2", "ib_write_bw -d rxe0 -x 1 -n 5 -s 3000", "write_bw.pcap", 1,
		func(t *testing.T, out string) {
			if n := strings.Count(out, "syndrome credits=31 -> psn_sequence_error"); n != 2 {
				t.Errorf("the replay with a reordered packet: %d sequence NAKs named, want 2:\n%s", n, out)
			}
		}, "--perftest", "ib_write_bw", "--reorder", "2")
	reorder.capture = func(t *testing.T, f *findings) {
		if f.naks["psn_sequence_error from "+guestAddr] != 2 {
			t.Errorf("a reordered packet: want two sequence NAKs, got %s", f)
		}
	}
	steps = append(steps, dup, corrupt, reorder)
	g := group{mtu: 1500, pcap: "replay.pcap", stepTimeout: 60e9, steps: steps}
	g.run(t)
}

// TestReplayRxeJumbo replays the recorded runs at path MTU 4096 (netdev
// MTU 9000 on both ends: 4096-byte WRITE segments) at a live rdma_rxe
// guest of the same MTU: rxe's own ib_write_bw client, and rxe's client
// of a run with uroce as the server (the project's capture).
func TestReplayRxeJumbo(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(sharedRxe); err != nil {
		t.Skipf("no reference captures: %v", err)
	}
	jumbo := func(name, capture string) step {
		return step{name: name, guest: "ib_write_bw -d rxe0 -x 1 -F -n 5 -s 10000",
			uroce: []string{"replay", "--timeout", "2s", "--perftest", "ib_write_bw", capture},
			check: func(t *testing.T, g, u string) {
				if !strings.Contains(u, "the live peer agrees with the recording") {
					t.Errorf("replay does not agree:\n%s", u)
				}
			}}
	}
	g := group{mtu: 9000, pcap: "replay-jumbo.pcap", stepTimeout: 60e9, steps: []step{
		jumbo("replay-write_bw_jumbo", filepath.Join(sharedRxe, "write_bw_jumbo.pcap")),
		jumbo("replay-own-write_bw-mtu4096-uroce_server", filepath.Join("..", "..", "pcaps", "rxe-6.1", "write_bw-mtu4096-uroce_server.pcap")),
	}}
	g.run(t)
}

// checkMarked checks that the SENDs a replay of host_rc_ce_csum.pcap
// played (its capture, -w) carry what the recording's did: DSCP 26, ECN
// CE and a valid, non-zero UDP checksum.
func checkMarked(t *testing.T, path string) {
	t.Helper()
	var sends, marked int
	var p bth.Packet
	err := eachFrame(path, func(_ int, f *pcaptool.Frame) {
		if bth.Parse(f.Data, &p) != nil || p.SrcIP().Unmap().String() != uroceAddr || p.Opcode() != bth.OpSendOnly {
			return
		}
		sends++
		sum := binary.BigEndian.Uint16(p.Frame[p.L4+6:])
		if p.TrafficClass() == 26<<2|3 && sum != 0 && p.UDPChecksumOK() {
			marked++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if sends != 5 || marked != sends {
		t.Errorf("the played SENDs: %d, %d of them with DSCP 26, CE and a UDP checksum; want 5 and 5", sends, marked)
	}
}
