package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/oob/oobtest"
)

var captures = []struct {
	name string
	tool Tool
}{
	{"write_bw", WriteBW},
	{"write_bw_jumbo", WriteBW},
	{"read_bw", ReadBW},
	{"send_bw", SendBW},
	{"atomic_bw", AtomicBW},
	{"write_lat", WriteLat},
	{"read_lat", ReadLat},
	{"send_lat", SendLat},
}

// side is what one side of a capture said, parsed.
type side struct {
	version       string
	cycle, cache  uint32
	mtu           MTU
	key           Dest
	report        Report
	hasReport     bool
	reportEntries []int // script indexes of its five report fields
}

func parseSide(t *testing.T, script []oobtest.Chunk, d oobtest.Dir) side {
	t.Helper()
	var s side
	var msgs [][]byte
	var idx []int
	for i, c := range script {
		if c.Dir == d {
			msgs = append(msgs, c.Data)
			idx = append(idx, i)
		}
	}
	if len(msgs) < 5 || len(msgs[0]) != VersionSize || len(msgs[1]) != 4 || len(msgs[2]) != 4 || len(msgs[3]) != 2 || len(msgs[4]) != KeySize {
		t.Fatalf("%s side does not start with version, sizes, MTU and a key: %q", d, msgs)
	}
	s.version = cString(msgs[0])
	s.cycle = binary.BigEndian.Uint32(msgs[1])
	s.cache = binary.BigEndian.Uint32(msgs[2])
	s.mtu = MTU(atoi(msgs[3]))
	var err error
	if s.key, err = ParseKey(msgs[4]); err != nil {
		t.Fatalf("%s key: %v", d, err)
	}
	var f []uint64
	for i, m := range msgs {
		if len(m) == 8 {
			f = append(f, binary.BigEndian.Uint64(m))
			s.reportEntries = append(s.reportEntries, idx[i])
		}
	}
	switch len(f) {
	case 0:
	case 5:
		s.hasReport = true
		s.report = Report{Size: f[0], Iters: f[1], BWPeak: math.Float64frombits(f[2]), BWAvg: math.Float64frombits(f[3]), MsgRate: math.Float64frombits(f[4])}
	default:
		t.Fatalf("%s side has %d 8-byte messages, want 0 or 5", d, len(f))
	}
	return s
}

// keyMask marks what differs between runs in a key message: QPN, PSN,
// R_Key, VA and GID. LID, out_reads, SRQN and the separators stay.
func keyMask() []bool {
	m := make([]bool, KeySize)
	for _, r := range [][2]int{{10, 16}, {17, 23}, {24, 32}, {33, 49}} {
		for j := r[0]; j < r[1]; j++ {
			m[j] = true
		}
	}
	for g := range 16 {
		m[50+3*g], m[51+3*g] = true, true
	}
	return m
}

func TestKeyMask(t *testing.T) {
	// The mask must cover exactly the per-run fields of a real key.
	a := Dest{OutReads: 0x80, QPN: 0x11, PSN: 0x21030e, RKey: 0x2ec, VAddr: 0x555d8ecb3000, GID: netip.MustParseAddr("::ffff:192.0.2.2").As16()}
	b := Dest{OutReads: 0x80, QPN: 0xfffffe, PSN: 0xeeeeee, RKey: 0xdddddddd, VAddr: 0xcccccccccccccccc, GID: [16]byte{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x01}}
	ka, kb := a.AppendKey(nil), b.AppendKey(nil)
	m := keyMask()
	for i := range ka {
		if (ka[i] != kb[i]) != m[i] && !(m[i] && ka[i] == kb[i]) {
			t.Errorf("byte %d (%q vs %q) mask %v", i, ka[i], kb[i], m[i])
		}
		if ka[i] == ':' && m[i] {
			t.Errorf("separator at %d masked", i)
		}
	}
}

func TestReplayCaptures(t *testing.T) {
	for _, tc := range captures {
		for _, role := range []Role{Client, Server} {
			for _, exact := range []bool{true, false} {
				mode := "masked"
				if exact {
					mode = "exact"
				}
				t.Run(fmt.Sprintf("%s/%s/%s", tc.name, role, mode), func(t *testing.T) {
					st := oobtest.CaptureStream(t, tc.name)
					replayOne(t, st, tc.tool, role, exact)
				})
			}
		}
	}
}

func replayOne(t *testing.T, st *oobtest.Stream, tool Tool, role Role, exact bool) {
	// Every message of these tools is one segment in the captures.
	script := st.Chunks
	ourDir, peerDir := oobtest.FromClient, oobtest.FromServer
	if role == Server {
		ourDir, peerDir = oobtest.FromServer, oobtest.FromClient
	}
	ours := parseSide(t, script, ourDir)
	peer := parseSide(t, script, peerDir)

	params := Params{Version: Version, MTU: ours.mtu}
	local := Dest{LID: ours.key.LID, OutReads: ours.key.OutReads, QPN: 0x345, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000,
		GID: netip.MustParseAddr("::ffff:198.51.100.7").As16(), SRQN: ours.key.SRQN}
	var report Report
	if role == Client && ours.hasReport {
		report = Report{Size: ours.report.Size, Iters: ours.report.Iters, BWPeak: 1.5, BWAvg: 1.25, MsgRate: 0.000123}
	}
	if exact {
		params.CycleBuffer, params.CacheLineSize = ours.cycle, ours.cache
		local = ours.key
		if role == Client {
			report = ours.report
		}
	}
	if ours.version != Version {
		t.Fatalf("capture advertises %q, want %q", ours.version, Version)
	}

	// Masks: key fields (masked mode), the server's report (uninitialised
	// memory in the stock tool: always), the client's measurements (masked
	// mode).
	masks := map[int][]bool{}
	if !exact {
		for i, c := range script {
			if c.Dir == ourDir && len(c.Data) == KeySize {
				masks[i] = keyMask()
			}
		}
	}
	for n, i := range ours.reportEntries {
		if role == Server || (!exact && n >= 2) {
			masks[i] = make([]bool, 8)
			for j := range masks[i] {
				masks[i][j] = true
			}
		}
	}
	check := oobtest.Masked(func(i int, _ []byte) []bool { return masks[i] })

	cc, sc := oobtest.Pair(t)
	nc, theirs := cc, sc
	if role == Server {
		nc, theirs = sc, cc
	}
	rec := &oobtest.Recorder{Conn: nc}
	replayErr := oobtest.Start(theirs, script, peerDir, check)

	var connected []Dest
	var runAt []oobtest.Position
	hooks := Hooks{
		Local: func(a Agreed) ([]Dest, error) {
			if a.RemoteVersion != peer.version || a.MTU != min(ours.mtu, peer.mtu) || a.RemoteMTU != peer.mtu {
				t.Errorf("agreed %+v; peer sent version %q MTU %d", a, peer.version, peer.mtu)
			}
			return []Dest{local}, nil
		},
		Connect: func(r []Dest) error { connected = append([]Dest(nil), r...); return nil },
		Run: func(int) error {
			read, written := rec.Counts()
			p := oobtest.Position{Client: written, Server: read}
			if role == Server {
				p = oobtest.Position{Client: read, Server: written}
			}
			runAt = append(runAt, p)
			return nil
		},
		Report: func() Report { return report },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Run(ctx, rec, Config{Tool: tool, Role: role}, params, hooks)
	nc.Close()
	if rerr := <-replayErr; rerr != nil {
		t.Fatalf("replay of the captured %s: %v\n(our %s returned %v)", peerDir, rerr, role, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(connected) != 1 || connected[0] != peer.key || len(res.Remote) != 1 || res.Remote[0] != peer.key {
		t.Errorf("connect hook got %+v, result %+v; want the peer's key %+v", connected, res.Remote, peer.key)
	}
	if res.HasReport != peer.hasReport || (peer.hasReport && math.Float64bits(res.RemoteReport.BWAvg) != math.Float64bits(peer.report.BWAvg)) {
		t.Errorf("remote report %+v (%v), want %+v (%v)", res.RemoteReport, res.HasReport, peer.report, peer.hasReport)
	}
	if err := oobtest.CheckCausality(script, ourDir, rec.Writes(), func(p, o int) bool {
		// Both sides send "done" without waiting for the other's.
		return string(script[p].Data) == string(DoneMsg) && string(script[o].Data) == string(DoneMsg)
	}); err != nil {
		t.Error(err)
	}
	if err := oobtest.CheckWriteBoundaries(script, ourDir, rec.Writes()); err != nil {
		t.Error(err)
	}
	// The RDMA traffic in the capture sits where this side's run hook was
	// called: every RoCE packet was captured at the point of the exchange
	// where the hook ran. A side without a run (the one-way servers) never
	// calls it.
	runs := len(runAt) > 0
	if len(st.RoCE) == 0 {
		t.Fatal("capture has no RoCE packets")
	}
	if wantRun := role == Client || tool == SendBW || tool == SendLat || tool == WriteLat; runs != wantRun {
		t.Errorf("run hook called %d times, want a run: %v", len(runAt), wantRun)
	}
	for _, p := range st.RoCE {
		if runs && p != runAt[0] {
			t.Errorf("RoCE packet captured at %+v, run hook called at %+v", p, runAt[0])
			break
		}
	}
}
