package stack_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
)

// Two devices joined by an in-memory pipe: one RDMA WRITE from a to b.
// On a real network, stack.Config{Interface: "eth0"} opens the interface
// through AF_XDP instead.
func Example() {
	ctx := context.Background()
	la, lb := pipe.New(pipe.Config{MTU: 1500})
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	a, _ := stack.Open(ctx, stack.Config{Link: la, MAC: macA, Addrs: []netip.Addr{ipA},
		Neighbors: stack.StaticNeighbors{ipB: macB}})
	b, _ := stack.Open(ctx, stack.Config{Link: lb, MAC: macB, Addrs: []netip.Addr{ipB},
		Neighbors: stack.StaticNeighbors{ipA: macA}})
	defer a.Close()
	defer b.Close()

	// ibv_alloc_pd, ibv_reg_mr, ibv_create_cq, ibv_create_qp on each side.
	connect := func(d *stack.Device, buf []byte) (*stack.QP, *stack.MR, *stack.CQ) {
		pd, _ := d.AllocPD()
		mr, _ := pd.RegisterMR(buf, stack.AccessLocalWrite|stack.AccessRemoteWrite|stack.AccessRemoteRead)
		cq, _ := d.CreateCQ(16)
		q, _ := pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16})
		q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead})
		return q, mr, cq
	}
	src := []byte("hello over RoCEv2")
	dst := make([]byte, len(src))
	qa, mra, cqa := connect(a, src)
	qb, mrb, _ := connect(b, dst)

	// The out-of-band exchange of QPN, PSN and GID, then INIT→RTR→RTS.
	qa.ToRTR(stack.RTRAttr{DestQPN: qb.QPN(), AH: stack.AHAttr{DGID: ipB, SGIDIndex: 1}, RQPSN: 200, MaxDestRdAtomic: 1, MinRNRTimer: 12})
	qb.ToRTR(stack.RTRAttr{DestQPN: qa.QPN(), AH: stack.AHAttr{DGID: ipA, SGIDIndex: 1}, RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 12})
	qa.ToRTS(stack.RTSAttr{SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1})
	qb.ToRTS(stack.RTSAttr{SQPSN: 200, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1})

	// ibv_post_send, then wait on and poll the CQ.
	err := qa.PostSend(&stack.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled,
		SG:     []stack.SGE{mra.SGE(0, uint32(len(src)))},
		Remote: stack.RemoteAddr{Addr: mrb.Addr(), RKey: mrb.RKey()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	wc := make([]stack.WC, 1)
	for cqa.Poll(wc) == 0 {
		cqa.Wait(ctx)
	}
	fmt.Printf("wr %d: %v\n", wc[0].ID, wc[0].Status)
	fmt.Printf("%s\n", dst)
	// Output:
	// wr 1: success
	// hello over RoCEv2
}
