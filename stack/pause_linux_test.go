package stack_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/pfc"
	"github.com/uroce/uroce/stack"
)

// TestVethPFC: PFC frames sent from B's end of a veth pair (an AF_PACKET
// socket beside B's device) reach A's device through its XDP program.
// A pause of priority 3, 65535 quanta at a link speed of 1 Mbit/s (33.6
// s), holds A's WRITE; a frame with time 0 lets it go. The waits are on
// counters and completions, not on time: the pause is far longer than
// the test waits while it holds.
func TestVethPFC(t *testing.T) {
	p := vethPair(t, 1500)
	a, b, _, _ := vethDevices(t, p, stack.Config{LinkSpeed: 1_000_000}, nil)
	pa, _ := a.AllocPD()
	pb, _ := b.AllocPD()
	cqa, _ := a.CreateCQ(16)
	cqb, _ := b.CreateCQ(16)
	src, dst := make([]byte, 4096), make([]byte, 4096)
	mra, _ := pa.RegisterMR(src, stack.AccessLocalWrite)
	mrb, _ := pb.RegisterMR(dst, stack.AccessLocalWrite|stack.AccessRemoteWrite)
	qa, err := pa.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cqa, RecvCQ: cqa, MaxSendWR: 4, MaxRecvWR: 1})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := pb.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cqb, RecvCQ: cqb, MaxSendWR: 1, MaxRecvWR: 1})
	if err != nil {
		t.Fatal(err)
	}
	ipA, ipB := p.AddrA[0].Addr(), p.AddrB[0].Addr()
	ga, gb := a.GIDIndex(ipA), b.GIDIndex(ipB)
	for _, c := range []struct {
		q, peer *stack.QP
		gid     int
		dgid    netip.Addr
	}{{qa, qb, ga, ipB}, {qb, qa, gb, ipA}} {
		if err := c.q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTR(stack.RTRAttr{DestQPN: c.peer.QPN(), AH: stack.AHAttr{DGID: c.dgid, SGIDIndex: c.gid}, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTS(stack.RTSAttr{Timeout: 20, RetryCnt: 7, RNRRetry: 7}); err != nil {
			t.Fatal(err)
		}
	}

	ifB, err := p.B.Interface(p.DevB)
	if err != nil {
		t.Fatal(err)
	}
	send := func(quanta uint16) {
		t.Helper()
		var q [8]uint16
		q[3] = quanta
		f := pfc.AppendPFC(nil, ifB.HardwareAddr, 1<<3, q)
		err := p.B.Do(func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifB.Index, Halen: 6, Addr: [8]byte{0x01, 0x80, 0xc2, 0, 0, 1}})
		})
		if err != nil {
			t.Fatalf("send a PFC frame: %v", err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s after 10 s: pause counters %+v", what, a.PauseCounters())
			}
		}
	}

	send(0xffff)
	waitFor("pause counted", func() bool { return a.PauseCounters().PrioPause[3] == 1 })
	wr := &stack.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{mra.SGE(0, 4096)},
		Remote: stack.RemoteAddr{Addr: mrb.Addr(), RKey: mrb.RKey()}}
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	wcs := make([]stack.WC, 1)
	sent0 := a.Counters().SentPkts
	time.Sleep(300 * time.Millisecond)
	if n := cqa.Poll(wcs); n != 0 || a.Counters().SentPkts != sent0 {
		t.Fatalf("A sent %d packets and completed %d during a 33 s pause", a.Counters().SentPkts-sent0, n)
	}
	send(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for cqa.Poll(wcs) == 0 {
		if err := cqa.Wait(ctx); err != nil {
			t.Fatalf("the WRITE did not complete after the resume: %v", err)
		}
	}
	if wcs[0].Status != stack.WCSuccess {
		t.Fatalf("completion %+v", wcs[0])
	}
	c := a.PauseCounters()
	if c.PrioPause[3] != 1 || c.PauseCtrl != 2 || c.PrioPauseTransition[3] != 1 {
		t.Errorf("pause counters %+v", c)
	}
}
