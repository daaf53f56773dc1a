package client_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// The same RDMA WRITE as package stack's example, written once against
// the verbs interfaces and run both ways: on in-process devices
// (verbs.Local) and through the uroce daemon (client.Open), which is how
// an unprivileged program uses a device the daemon serves. Here both
// devices and both daemons live in the example's process, joined by an
// in-memory pipe; on a real host `uroce daemon -d eth1` serves
// /run/uroce/uroce0.sock and client.Open(ctx, "") connects to it.
func Example() {
	ctx := context.Background()
	la, lb := pipe.New(pipe.Config{MTU: 1500})
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	nb := stack.StaticNeighbors{ipA: macA, ipB: macB}
	a, _ := stack.Open(ctx, stack.Config{Link: la, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: nb})
	b, _ := stack.Open(ctx, stack.Config{Link: lb, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb})
	defer a.Close()
	defer b.Close()

	// In-process.
	fmt.Println(write(verbs.Local(a), verbs.Local(b), ipA, ipB))

	// Through the daemon.
	dir, _ := os.MkdirTemp("", "uroce-example-")
	defer os.RemoveAll(dir)
	sa, _ := daemon.Listen(daemon.Config{Device: a, Socket: filepath.Join(dir, "a.sock")})
	sb, _ := daemon.Listen(daemon.Config{Device: b, Socket: filepath.Join(dir, "b.sock")})
	go sa.Serve()
	go sb.Serve()
	defer sa.Shutdown()
	defer sb.Shutdown()
	ca, err := client.Open(ctx, sa.Socket())
	if err != nil {
		fmt.Println(err)
		return
	}
	cb, _ := client.Open(ctx, sb.Socket())
	fmt.Println(write(ca, cb, ipA, ipB))
	ca.Close()
	cb.Close()
	// Output:
	// wr 1: success: hello over RoCEv2
	// wr 1: success: hello over RoCEv2
}

// write makes one RC QP on each device and WRITEs from a to b.
func write(a, b verbs.Device, ipA, ipB netip.Addr) string {
	ctx := context.Background()
	side := func(d verbs.Device) (verbs.QP, verbs.MR, verbs.CQ) {
		buf, _ := d.AllocBuffer(64)
		pd, _ := d.AllocPD()
		mr, _ := pd.RegisterMR(buf, stack.AccessLocalWrite|stack.AccessRemoteWrite)
		cq, _ := d.CreateCQ(16)
		q, _ := pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16})
		q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite})
		return q, mr, cq
	}
	qa, mra, cqa := side(a)
	qb, mrb, _ := side(b)
	msg := "hello over RoCEv2"
	copy(mra.Bytes(), msg)
	qa.ToRTR(stack.RTRAttr{DestQPN: qb.QPN(), AH: stack.AHAttr{DGID: ipB, SGIDIndex: 1}, RQPSN: 200, MaxDestRdAtomic: 1, MinRNRTimer: 12})
	qb.ToRTR(stack.RTRAttr{DestQPN: qa.QPN(), AH: stack.AHAttr{DGID: ipA, SGIDIndex: 1}, RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 12})
	qa.ToRTS(stack.RTSAttr{SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1})
	qb.ToRTS(stack.RTSAttr{SQPSN: 200, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1})
	if err := qa.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled,
		SG: []stack.SGE{mra.SGE(0, uint32(len(msg)))}, Remote: stack.RemoteAddr{Addr: mrb.Addr(), RKey: mrb.RKey()}}); err != nil {
		return err.Error()
	}
	wc := make([]stack.WC, 1)
	for cqa.Poll(wc) == 0 {
		cqa.Wait(ctx)
	}
	return fmt.Sprintf("wr %d: %v: %s", wc[0].ID, wc[0].Status, mrb.Bytes()[:len(msg)])
}
