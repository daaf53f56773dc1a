package perftest

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/oob/oobtest"
)

func ver(s string) []byte {
	b := make([]byte, VersionSize)
	copy(b, s)
	return b
}

// peerScript plays a server that sends fixed replies after reading what the
// client sends first.
func peerScript(t *testing.T, conn io.ReadWriter, steps ...[]byte) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		var got []byte
		for i := 0; i+1 < len(steps); i += 2 {
			buf := make([]byte, len(steps[i]))
			if _, err := io.ReadFull(conn, buf); err != nil {
				break
			}
			got = append(got, buf...)
			if _, err := conn.Write(steps[i+1]); err != nil {
				break
			}
		}
		ch <- got
	}()
	return ch
}

func TestNegotiate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name                 string
		peerMTU              []byte
		localMTU             MTU
		wantMTU, wantRemote  MTU
		peerCycle, peerCache []byte
		wantCycle, wantCache uint32
	}{
		{"peer smaller", []byte("3\x00"), MTU4096, MTU1024, MTU1024, []byte{0, 0, 0x10, 0}, []byte{0, 0, 0, 0x40}, 4096, 64},
		{"peer larger", []byte("5\x00"), MTU1024, MTU1024, MTU4096, []byte{0, 1, 0, 0}, []byte{0, 0, 0, 0x80}, 65536, 128},
		{"peer invalid", []byte("9\x00"), MTU2048, MTU2048, 9, []byte{0, 0, 0, 1}, []byte{0, 0, 0, 1}, 4096, 64},
		{"peer zero", []byte("0\x00"), MTU512, MTU512, 0, []byte{0, 0, 0x10, 0}, []byte{0, 0, 0, 0x40}, 4096, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := oobtest.Pair(t)
			sent := peerScript(t, sc, make([]byte, 16), ver("6.06"), make([]byte, 4), tc.peerCycle, make([]byte, 4), tc.peerCache, make([]byte, 2), tc.peerMTU)
			a, err := NewConn(cc, Client).Negotiate(ctx, Params{MTU: tc.localMTU})
			if err != nil {
				t.Fatal(err)
			}
			if a.MTU != tc.wantMTU || a.RemoteMTU != tc.wantRemote || a.CycleBuffer != tc.wantCycle || a.CacheLineSize != tc.wantCache || a.RemoteVersion != "6.06" {
				t.Errorf("agreed %+v", a)
			}
			want := string(ver("6.06")) + "\x00\x00\x10\x00" + "\x00\x00\x00\x40" + string([]byte{byte('0' + tc.localMTU), 0})
			if got := <-sent; string(got) != want {
				t.Errorf("sent %q, want %q", got, want)
			}
		})
	}
}

func TestNegotiateVersions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range []string{"5.60", "4.5", "", "garbage"} {
		cc, sc := oobtest.Pair(t)
		peerScript(t, sc, make([]byte, 16), ver(v))
		_, err := NewConn(cc, Client).Negotiate(ctx, Params{MTU: MTU1024})
		if !errors.Is(err, ErrVersion) {
			t.Errorf("peer version %q: error %v, want ErrVersion", v, err)
		}
	}
	for _, v := range []string{"5.70", "6.27", "6.06-1"} {
		cc, sc := oobtest.Pair(t)
		peerScript(t, sc, make([]byte, 16), ver(v), make([]byte, 4), make([]byte, 4), make([]byte, 4), make([]byte, 4), make([]byte, 2), []byte("3\x00"))
		if _, err := NewConn(cc, Client).Negotiate(ctx, Params{MTU: MTU1024}); err != nil {
			t.Errorf("peer version %q: %v", v, err)
		}
	}
	cc, _ := oobtest.Pair(t)
	for _, v := range []string{"6.28", "5.69", "6.06.........xyz"} {
		if _, err := NewConn(cc, Client).Negotiate(ctx, Params{Version: v, MTU: MTU1024}); !errors.Is(err, ErrVersion) {
			t.Errorf("advertising %q: error %v, want ErrVersion", v, err)
		}
	}
	if _, err := NewConn(cc, Client).Negotiate(ctx, Params{MTU: 6}); err == nil {
		t.Error("negotiating with MTU 6 succeeded")
	}
}

func TestReportsAndDone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, sc := oobtest.Pair(t)
	mine := Report{Size: 3000, Iters: 5, BWPeak: math.Inf(1), BWAvg: 1.1878, MsgRate: 0.000415}
	theirs := Report{Size: 0x00007ffeca6c00c4, Iters: 6, BWPeak: math.Float64frombits(0x00007fd3f456411a)}
	ch := make(chan error, 1)
	var got Report
	go func() {
		var err error
		got, err = NewConn(sc, Server).ExchangeReports(ctx, theirs)
		if err == nil {
			err = NewConn(sc, Server).Done(ctx)
		}
		ch <- err
	}()
	back, err := NewConn(cc, Client).ExchangeReports(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if err := NewConn(cc, Client).Done(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if got != mine || math.Float64bits(back.BWPeak) != math.Float64bits(theirs.BWPeak) || back.Size != theirs.Size {
		t.Errorf("server got %+v, client got %+v", got, back)
	}

	// A peer that answers "done" with something else.
	cc, sc = oobtest.Pair(t)
	peerScript(t, sc, make([]byte, 5), []byte("nope\x00"))
	if err := NewConn(cc, Client).Done(ctx); err == nil {
		t.Error("Done accepted a bad reply")
	}

	// perftest closes straight after its "done": a peer that leaves
	// without one, by end of stream or by a reset, ends the exchange too.
	for _, reset := range []bool{false, true} {
		cc, sc = oobtest.Pair(t)
		go func(sc net.Conn) {
			buf := make([]byte, 5)
			io.ReadFull(sc, buf)
			if reset {
				sc.(*net.TCPConn).SetLinger(0)
			}
			sc.Close()
		}(sc)
		if err := NewConn(cc, Client).Done(ctx); err != nil {
			t.Errorf("peer left (reset %v): Done: %v", reset, err)
		}
	}
}

func TestCancelInBarrier(t *testing.T) {
	cc, _ := oobtest.Pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		_, err := NewConn(cc, Server).HandShake(ctx, Dest{})
		ch <- err
	}()
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	// The connection is usable again after a cancelled call: the deadline
	// is cleared.
	if _, err := cc.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
}

func TestNoGIDKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, sc := oobtest.Pair(t)
	peerKey := Dest{LID: 3, OutReads: 16, QPN: 0x48, PSN: 0x12, RKey: 9, VAddr: 0x1000}
	sent := peerScript(t, sc, make([]byte, KeySizeNoGID), peerKey.AppendKeyNoGID(nil))
	c := NewConn(cc, Client)
	c.NoGID = true
	local := Dest{LID: 7, QPN: 0x11}
	got, err := c.HandShake(ctx, local)
	if err != nil || got != peerKey {
		t.Fatalf("HandShake = %+v, %v", got, err)
	}
	if s := <-sent; string(s) != string(local.AppendKeyNoGID(nil)) {
		t.Errorf("sent %q", s)
	}
}
