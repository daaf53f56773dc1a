package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/oob/oobtest"
)

func gid(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func TestDestWire(t *testing.T) {
	d := Dest{LID: 0, QPN: 0x12, PSN: 0x55a9b8, GID: gid("::ffff:192.0.2.2")}
	// From rc_pingpong.pcap, the client's message.
	want := "0000:000012:55a9b8:00000000000000000000ffffc0000202\x00"
	got := d.AppendWire(nil)
	if string(got) != want {
		t.Fatalf("AppendWire = %q, want %q", got, want)
	}
	back, err := ParseDest(got)
	if err != nil || back != d {
		t.Fatalf("ParseDest = %+v, %v; want %+v", back, err, d)
	}
	full := Dest{LID: 0xffff, QPN: 0xffffff, PSN: 0xabcdef, GID: gid("fe80::5054:ff:fe00:201")}
	if got := full.AppendWire(nil); len(got) != MessageSize || string(got) != "ffff:ffffff:abcdef:fe80000000000000505400fffe000201\x00" {
		t.Fatalf("AppendWire = %q", got)
	}
	// QPN and PSN are 24-bit fields: wider values are cut.
	if got := (Dest{QPN: 0x1000011, PSN: 0x3000001}).AppendWire(nil); string(got[:19]) != "0000:000011:000001:" {
		t.Fatalf("AppendWire = %q", got)
	}
	// Upper-case hex, as sscanf("%x") accepts.
	up, err := ParseDest([]byte("00AB:0000C1:ABCDEF:FE80000000000000505400FFFE000201\x00"))
	if err != nil || up.LID != 0xab || up.QPN != 0xc1 || up.PSN != 0xabcdef || up.GID != gid("fe80::5054:ff:fe00:201") {
		t.Fatalf("ParseDest upper case = %+v, %v", up, err)
	}
}

func TestParseDestErrors(t *testing.T) {
	good := "0000:000012:55a9b8:00000000000000000000ffffc0000202\x00"
	for name, msg := range map[string]string{
		"short":        good[:51],
		"long":         good + "x",
		"no NUL":       good[:51] + "0",
		"bad LID":      "00g0" + good[4:],
		"LID colon":    "00000" + good[5:],
		"bad QPN":      good[:5] + "00001z" + good[11:],
		"QPN colon":    good[:11] + "-" + good[12:],
		"bad PSN":      good[:12] + "x" + good[13:],
		"PSN colon":    good[:18] + "0" + good[19:],
		"bad GID":      good[:40] + "q" + good[41:],
		"done message": "done\x00" + strings.Repeat("\x00", 47),
		"empty":        "",
	} {
		if _, err := ParseDest([]byte(msg)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: ParseDest(%q) error = %v, want ErrFormat", name, msg, err)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000012:55a9b8:00000000000000000000ffffc0000202\x00"))
	f.Add([]byte("0000:000000:000000:00000000000000000000000000000000\x00"))
	f.Add([]byte("done\x00"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParseDest(msg)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to the same message, up to hex case.
		if got := d.AppendWire(nil); !bytes.EqualFold(got, msg) {
			t.Fatalf("ParseDest(%q) = %+v re-encodes as %q", msg, d, got)
		}
	})
}

// capturedDests parses the address messages of one side of a capture.
func capturedDests(t *testing.T, st *oobtest.Stream, d oobtest.Dir, count int) []Dest {
	t.Helper()
	b := st.Bytes(d)
	if len(b) < count*MessageSize {
		t.Fatalf("%s side has %d bytes, want at least %d", d, len(b), count*MessageSize)
	}
	out := make([]Dest, count)
	for i := range out {
		var err error
		if out[i], err = ParseDest(b[i*MessageSize : (i+1)*MessageSize]); err != nil {
			t.Fatalf("captured %s message %d: %v", d, i, err)
		}
	}
	return out
}

// maskAddresses marks QPN, PSN and GID of every non-zero address message in
// a run of messages: what differs between runs. LIDs, separators, the zero
// padding of the SRQ tool and "done" must match exactly.
func maskAddresses(_ int, want []byte) []bool {
	m := make([]bool, len(want))
	if len(want)%MessageSize != 0 {
		return m
	}
	zero := Dest{}.AppendWire(nil)
	for off := 0; off < len(want); off += MessageSize {
		if bytes.Equal(want[off:off+MessageSize], zero) {
			continue
		}
		for _, r := range [][2]int{{5, 11}, {12, 18}, {19, 51}} {
			for j := r[0]; j < r[1]; j++ {
				m[off+j] = true
			}
		}
	}
	return m
}

func synthetic(n int) []Dest {
	out := make([]Dest, n)
	for i := range out {
		out[i] = Dest{QPN: 0x345 + uint32(i), PSN: 0xabcdef - uint32(i), GID: gid("::ffff:198.51.100.7")}
	}
	return out
}

func TestReplayCaptures(t *testing.T) {
	for _, tc := range []struct {
		capture string
		tool    Tool
		qps     int
	}{
		{"rc_pingpong", RC, 1},
		{"rc_pingpong_pad", RC, 1},
		{"uc_pingpong", UC, 1},
		{"ud_pingpong", UD, 1},
		{"srq_pingpong", SRQ, 2},
	} {
		for _, role := range []oobtest.Dir{oobtest.FromClient, oobtest.FromServer} {
			for _, mode := range []string{"exact", "masked"} {
				name := fmt.Sprintf("%s/%s/%s", tc.capture, role, mode)
				t.Run(name, func(t *testing.T) {
					st := oobtest.CaptureStream(t, tc.capture)
					replayOne(t, st, tc.tool, tc.qps, role, mode == "exact")
				})
			}
		}
	}
}

// replayOne runs our implementation as role against the capture's other side.
func replayOne(t *testing.T, st *oobtest.Stream, tool Tool, qps int, role oobtest.Dir, exact bool) {
	count := tool.Messages()
	peer := oobtest.FromServer
	if role == oobtest.FromServer {
		peer = oobtest.FromClient
	}
	local := synthetic(qps)
	check := oobtest.Masked(maskAddresses)
	if exact {
		local = capturedDests(t, st, role, qps)
		check = oobtest.Exact
	}
	wantRemote := capturedDests(t, st, peer, count)
	script := st.Merged()

	cc, sc := oobtest.Pair(t)
	ours, theirs := cc, sc
	if role == oobtest.FromServer {
		ours, theirs = sc, cc
	}
	rec := &oobtest.Recorder{Conn: ours}
	replayErr := oobtest.Start(theirs, script, peer, check)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var remote []Dest
	var err error
	var hooked []Dest
	if role == oobtest.FromClient {
		remote, err = Client(ctx, rec, local, count)
	} else {
		remote, err = Server(ctx, rec, local, count, func(r []Dest) error {
			hooked = append([]Dest(nil), r...)
			return nil
		})
	}
	ours.Close()
	if rerr := <-replayErr; rerr != nil {
		t.Fatalf("replay of the captured %s: %v\n(our %s returned %v)", peer, rerr, role, err)
	}
	if err != nil {
		t.Fatalf("%s: %v", role, err)
	}
	if len(remote) != count {
		t.Fatalf("got %d remote addresses, want %d", len(remote), count)
	}
	for i := range remote {
		if remote[i] != wantRemote[i] {
			t.Errorf("remote[%d] = %+v, want %+v", i, remote[i], wantRemote[i])
		}
	}
	if role == oobtest.FromServer && len(hooked) != count {
		t.Errorf("connect hook saw %d addresses, want %d", len(hooked), count)
	}
	if err := oobtest.CheckCausality(script, role, rec.Writes(), nil); err != nil {
		t.Error(err)
	}
	// One write per message for the single-QP tools, whose peers read the
	// reply with one read(2); the SRQ tool reads in a loop and the capture
	// shows its 256 writes coalesced, so its addresses go in one Write.
	if tool != SRQ {
		if err := oobtest.CheckWriteBoundaries(st.Chunks, role, rec.Writes()); err != nil {
			t.Error(err)
		}
	} else if w := rec.Writes(); len(w) < 1 || len(w[0].Data) != SRQMessages*MessageSize {
		t.Errorf("SRQ addresses not sent with one Write: %d writes", len(w))
	}
}

func TestClientServer(t *testing.T) {
	for _, tool := range []Tool{RC, UD, SRQ} {
		t.Run(tool.String(), func(t *testing.T) {
			cc, sc := oobtest.Pair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n := 1
			if tool == SRQ {
				n = 16
			}
			cl, sv := synthetic(n), synthetic(n)
			for i := range sv {
				sv[i].QPN += 0x100
				sv[i].GID = gid("::ffff:198.51.100.8")
			}
			type res struct {
				d   []Dest
				err error
			}
			ch := make(chan res, 1)
			var hooked []Dest
			go func() {
				d, err := Server(ctx, sc, sv, tool.Messages(), func(r []Dest) error { hooked = r; return nil })
				ch <- res{d, err}
			}()
			got, err := Client(ctx, cc, cl, tool.Messages())
			if err != nil {
				t.Fatal(err)
			}
			r := <-ch
			if r.err != nil {
				t.Fatal(r.err)
			}
			for i := range tool.Messages() {
				var wantS, wantC Dest
				if i < n {
					wantS, wantC = sv[i], cl[i]
				}
				if got[i] != wantS || r.d[i] != wantC || hooked[i] != wantC {
					t.Fatalf("entry %d: client got %+v want %+v; server got %+v (hook %+v) want %+v",
						i, got[i], wantS, r.d[i], hooked[i], wantC)
				}
			}
		})
	}
}

func TestServerConnectFailure(t *testing.T) {
	cc, sc := oobtest.Pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boom := errors.New("modify QP failed")
	done := make(chan error, 1)
	go func() {
		_, err := Server(ctx, sc, synthetic(1), 1, func([]Dest) error { return boom })
		sc.Close()
		done <- err
	}()
	_, err := Client(ctx, cc, synthetic(1), 1)
	if err == nil {
		t.Fatal("client succeeded against a server that could not connect")
	}
	if serr := <-done; !errors.Is(serr, boom) {
		t.Fatalf("server error = %v, want %v", serr, boom)
	}
}

func TestServerBadDone(t *testing.T) {
	cc, sc := oobtest.Pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Server(ctx, sc, synthetic(1), 1, nil)
		done <- err
	}()
	cc.Write(synthetic(1)[0].AppendWire(nil))
	buf := make([]byte, MessageSize)
	if _, err := cc.Read(buf); err != nil {
		t.Fatal(err)
	}
	cc.Write([]byte("nope\x00"))
	if err := <-done; err == nil || !strings.Contains(err.Error(), "done") {
		t.Fatalf("server error = %v, want a bad-done error", err)
	}
}

func TestCancel(t *testing.T) {
	cc, _ := oobtest.Pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Client(ctx, cc, synthetic(1), 1) // the server never answers
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
}

func TestBadArguments(t *testing.T) {
	cc, _ := oobtest.Pair(t)
	ctx := context.Background()
	if _, err := Client(ctx, cc, nil, 1); err == nil {
		t.Error("Client with no local address succeeded")
	}
	if _, err := Client(ctx, cc, synthetic(2), 1); err == nil {
		t.Error("Client with more addresses than messages succeeded")
	}
	if _, err := Server(ctx, cc, synthetic(1), 0, nil); err == nil {
		t.Error("Server with zero messages succeeded")
	}
}

// Expected lines below were printed by the format strings of rdma-core 44's
// examples, compiled with gcc against glibc.
func TestOutputLines(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x6d5ff9, GID: gid("::ffff:192.0.2.1")}
	if got, want := LocalAddressLine(RC, d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x6d5ff9, GID ::ffff:192.0.2.1\n"; got != want {
		t.Errorf("LocalAddressLine(RC) = %q, want %q", got, want)
	}
	if got, want := LocalAddressLine(UD, d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x6d5ff9: GID ::ffff:192.0.2.1\n"; got != want {
		t.Errorf("LocalAddressLine(UD) = %q, want %q", got, want)
	}
	if got, want := RemoteAddressLine(Dest{LID: 0x1a, QPN: 0x12, PSN: 0x55a9b8}), "  remote address: LID 0x001a, QPN 0x000012, PSN 0x55a9b8, GID ::\n"; got != want {
		t.Errorf("RemoteAddressLine = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		size, iters int
		us          int64
		want        string
	}{
		{64, 5, 12345, "640 bytes in 0.01 seconds = 0.41 Mbit/sec\n5 iters in 0.01 seconds = 2469.00 usec/iter\n"},
		{4096, 1000, 987654, "8192000 bytes in 0.99 seconds = 66.36 Mbit/sec\n1000 iters in 0.99 seconds = 987.65 usec/iter\n"},
		{13, 3, 1, "78 bytes in 0.00 seconds = 624.00 Mbit/sec\n3 iters in 0.00 seconds = 0.33 usec/iter\n"},
		{1, 1, 0, "2 bytes in 0.00 seconds = inf Mbit/sec\n1 iters in 0.00 seconds = 0.00 usec/iter\n"},
		{1048576, 1000, 3000000, "2097152000 bytes in 3.00 seconds = 5592.41 Mbit/sec\n1000 iters in 3.00 seconds = 3000.00 usec/iter\n"},
		// Beyond 2^24 µs the float loses the last bits, as in the tools.
		{4096, 1000, 16777217, "8192000 bytes in 16.78 seconds = 3.91 Mbit/sec\n1000 iters in 16.78 seconds = 16777.22 usec/iter\n"},
	} {
		if got := ResultLines(tc.size, tc.iters, time.Duration(tc.us)*time.Microsecond); got != tc.want {
			t.Errorf("ResultLines(%d, %d, %dµs) = %q, want %q", tc.size, tc.iters, tc.us, got, tc.want)
		}
	}
}
