package stack

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/cpustat"
	"github.com/uroce/uroce/internal/fifo"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
)

// Benchmarks over the pipe: two devices with their engine goroutines in
// one process, on real time. The benchmark goroutine posts and reaps as
// perftest does: batches of requests with the last one signaled, a
// bounded number of batches outstanding.
//
//	go test -run '^$' -bench . -benchtime 2s ./stack

type benchConn struct {
	da, db   *Device
	qa, qb   *QP
	cqa, cqb *CQ
	mra, mrb *MR
}

func newBenchConn(b *testing.B, faults *fault.Config, busyPoll bool, timeout uint8) *benchConn {
	return newBenchConnCfg(b, pipe.Config{MTU: 9000}, 0, faults, busyPoll, timeout)
}

func newBenchConnCfg(b *testing.B, pc pipe.Config, batch int, faults *fault.Config, busyPoll bool, timeout uint8) *benchConn {
	return newBenchConnWin(b, pc, batch, 0, faults, busyPoll, timeout)
}

func newBenchConnWin(b *testing.B, pc pipe.Config, batch, window int, faults *fault.Config, busyPoll bool, timeout uint8, mods ...func(*Config)) *benchConn {
	b.Helper()
	c := &benchConn{}
	c.da, c.db = openRunningCfg(b, pc, batch, window, faults, busyPoll, mods...)
	b.Cleanup(func() {
		c.da.Close()
		c.db.Close()
	})
	pa, _ := c.da.AllocPD()
	pb, _ := c.db.AllocPD()
	c.cqa, _ = c.da.CreateCQ(1 << 16)
	c.cqb, _ = c.db.CreateCQ(1 << 16)
	acc := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	var err error
	if c.mra, err = pa.RegisterMR(make([]byte, 8<<20), acc); err != nil {
		b.Fatal(err)
	}
	if c.mrb, err = pb.RegisterMR(make([]byte, 8<<20), acc); err != nil {
		b.Fatal(err)
	}
	// Retry count 7 retries forever (as rdma_rxe does): on this shared
	// machine, a few stalled scheduling slices must not end a run.
	init := QPInit{Type: RC, MaxSendWR: 4096, MaxRecvWR: 16384, InfiniteRetry7: true}
	init.SendCQ, init.RecvCQ = c.cqa, c.cqa
	if c.qa, err = pa.CreateQP(init); err != nil {
		b.Fatal(err)
	}
	init.SendCQ, init.RecvCQ = c.cqb, c.cqb
	if c.qb, err = pb.CreateQP(init); err != nil {
		b.Fatal(err)
	}
	for i, x := range []struct {
		q, peer *QP
		gid     netip.Addr
	}{{c.qa, c.qb, netip.AddrFrom16(ipB.As16())}, {c.qb, c.qa, netip.AddrFrom16(ipA.As16())}} {
		if err := x.q.ToInit(InitAttr{AccessFlags: acc &^ AccessLocalWrite}); err != nil {
			b.Fatal(err)
		}
		if err := x.q.ToRTR(RTRAttr{DestQPN: x.peer.QPN(), AH: AHAttr{DGID: x.gid, SGIDIndex: 1}, PathMTU: MTU4096,
			RQPSN: PSN(1000 * i), MaxDestRdAtomic: 16, MinRNRTimer: 1}); err != nil {
			b.Fatal(err)
		}
		if err := x.q.ToRTS(RTSAttr{SQPSN: PSN(1000 * (1 - i)), Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// run posts b.N requests of size bytes and waits for all of them.
func (c *benchConn) run(b *testing.B, op Opcode, size, batch, depth int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wrs := make([]SendWR, batch)
	slots := (8 << 20) / max(size, 64)
	for i := range wrs {
		off := uint64((i % slots) * max(size, 64))
		wrs[i] = SendWR{ID: uint64(i), Op: op, SG: []SGE{c.mra.SGE(off, uint32(size))},
			Remote: RemoteAddr{c.mrb.Addr() + off, c.mrb.RKey()}}
	}
	wrs[batch-1].Flags = SendSignaled
	send := op == OpSend || op == OpSendWithImm
	recvDone := make(chan error, 1)
	if send {
		// The receiver, as a separate process would be: keeps receives
		// posted, reaping their completions.
		rwrs := make([]RecvWR, 16384)
		for i := range rwrs {
			off := uint64((i % slots) * max(size, 64))
			rwrs[i] = RecvWR{ID: uint64(i), SG: []SGE{c.mrb.SGE(off, uint32(size))}}
		}
		if _, err := c.qb.PostRecvBatch(rwrs); err != nil {
			b.Fatal(err)
		}
		go func() {
			rwcs := make([]WC, 256)
			again := make([]RecvWR, 0, len(rwcs))
			for got := 0; got < b.N; {
				if err := c.cqb.Wait(ctx); err != nil {
					recvDone <- err
					return
				}
				n := c.cqb.Poll(rwcs)
				again = again[:0]
				for _, wc := range rwcs[:n] {
					if wc.Status != 0 {
						recvDone <- fmt.Errorf("receive: %v", wc.Status)
						return
					}
					again = append(again, rwrs[wc.ID])
				}
				if _, err := c.qb.PostRecvBatch(again); err != nil {
					recvDone <- err
					return
				}
				got += n
			}
			recvDone <- nil
		}()
	}
	wcs := make([]WC, 64)
	var sizes fifo.Queue[int]
	posted, done, inflight := 0, 0, 0
	var ms0, ms1 runtime.MemStats
	sent0 := c.da.Counters().SentPkts + c.db.Counters().SentPkts
	retx0 := c.da.Counters().QP.RetransmittedPkts
	runtime.ReadMemStats(&ms0)
	cpu0, cpuErr := cpustat.Read()
	proc0, procErr := cpustat.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	for done < b.N {
		for posted < b.N && inflight < depth {
			k := min(batch, b.N-posted)
			w := wrs[:k]
			w[k-1].Flags = SendSignaled
			n, err := c.qa.PostSendBatch(w)
			w[k-1].Flags = wrs[batch-1].Flags
			if k < batch {
				w[k-1].Flags = 0
			}
			if err != nil {
				b.Fatal(err)
			}
			posted += n
			inflight++
			sizes.Push(k)
		}
		n := c.cqa.Poll(wcs)
		if n == 0 {
			if err := c.cqa.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != 0 {
				ca, cb := c.da.Counters(), c.db.Counters()
				b.Fatalf("completion: %v after %d of %d\nA: %v\nB: %v", wc.Status, done, b.N, ca.Map(), cb.Map())
			}
			done += sizes.Pop()
			inflight--
		}
	}
	if send {
		if err := <-recvDone; err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	pkts := c.da.Counters().SentPkts + c.db.Counters().SentPkts - sent0
	b.ReportMetric(float64(b.N)*float64(size)*8/el.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mmsg/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(pkts), "allocs/pkt")
	b.ReportMetric(float64(pkts)/float64(b.N), "pkts/op")
	b.ReportMetric(float64(c.da.Counters().QP.RetransmittedPkts-retx0)/float64(b.N), "retx/op")
	// The hypervisor's share of the run: on a shared virtual machine,
	// runs of the same code differ by their steal time (README).
	if cpu1, err := cpustat.Read(); err == nil && cpuErr == nil {
		b.ReportMetric(100*cpustat.StealShare(cpu0, cpu1), "steal%")
	}
	// CPU seconds of both stacks per GB moved: steal is not in them.
	if proc1, err := cpustat.ProcessCPU(); err == nil && procErr == nil {
		b.ReportMetric((proc1-proc0).Seconds()/(float64(b.N)*float64(size)/1e9), "cpu-s/GB")
	}
	if testing.Verbose() {
		ca, cb := c.da.Counters(), c.db.Counters()
		b.Logf("A: %v", ca.Map())
		b.Logf("B: %v", cb.Map())
	}
}

// BenchmarkRCWrite64K is RC WRITE goodput with the default settings (the
// default send window, ACK timeout 14 as perftest sets it); its lossy
// twin BenchmarkRCWrite64KDrop5 differs only in the link.
func BenchmarkRCWrite64K(b *testing.B) {
	c := newBenchConn(b, nil, false, 14)
	b.ReportAllocs()
	c.run(b, OpWrite, 64<<10, 8, 8)
}

// BenchmarkRCWrite64KDrop5 is BenchmarkRCWrite64K with 5 % of the frames
// of both directions lost: go-back-N, NAKs and loss probes recover, the
// ACK timeout (67 ms) should not have to.
func BenchmarkRCWrite64KDrop5(b *testing.B) {
	c := newBenchConn(b, &fault.Config{Seed: 1, Drop: 0.05}, false, 14)
	b.ReportAllocs()
	c.run(b, OpWrite, 64<<10, 8, 8)
}

// BenchmarkRCWrite64KDrop5Keep is BenchmarkRCWrite64KDrop5 between
// responders that keep the requests past a gap (Config.KeepPastGap).
func BenchmarkRCWrite64KDrop5Keep(b *testing.B) {
	c := newBenchConnWin(b, pipe.Config{MTU: 9000}, 0, 0, &fault.Config{Seed: 1, Drop: 0.05}, false, 14,
		func(cfg *Config) { cfg.KeepPastGap = true })
	b.ReportAllocs()
	c.run(b, OpWrite, 64<<10, 8, 8)
}

// BenchmarkRCWrite64KDCQCN is BenchmarkRCWrite64K with DCQCN off, on
// (no congestion: no CNP), and on after one CNP the QP has recovered
// from (the reaction point set up, its rate back at the line rate): the
// pacing checks must cost next to nothing when nothing is congested.
func BenchmarkRCWrite64KDCQCN(b *testing.B) {
	for _, mode := range []string{"off", "on", "recovered"} {
		b.Run(mode, func(b *testing.B) {
			c := newBenchConnWin(b, pipe.Config{MTU: 9000}, 0, 0, nil, false, 14, func(cfg *Config) { cfg.NoDCQCN = mode == "off" })
			if mode == "recovered" {
				c.qa.mu.Lock()
				c.qa.q.Receive(c.da.clock.Now(), cnpFor(b, c.qa))
				c.qa.mu.Unlock()
			}
			b.ReportAllocs()
			c.run(b, OpWrite, 64<<10, 8, 8)
		})
	}
}

func BenchmarkRCSend64K(b *testing.B) {
	c := newBenchConn(b, nil, false, 14)
	b.ReportAllocs()
	c.run(b, OpSend, 64<<10, 8, 8)
}

func BenchmarkRCRead64K(b *testing.B) {
	c := newBenchConn(b, nil, false, 14)
	b.ReportAllocs()
	c.run(b, OpRead, 64<<10, 4, 4)
}

// BenchmarkRCRead64KDrop5 is BenchmarkRCRead64K with 5 % of the frames of
// both directions lost: a READ that lost responses is asked for again,
// the others' responses are kept.
func BenchmarkRCRead64KDrop5(b *testing.B) {
	c := newBenchConn(b, &fault.Config{Seed: 1, Drop: 0.05}, false, 14)
	b.ReportAllocs()
	c.run(b, OpRead, 64<<10, 4, 4)
}

func BenchmarkRCWrite64B(b *testing.B) {
	c := newBenchConn(b, nil, false, 14)
	b.ReportAllocs()
	c.run(b, OpWrite, 64, 32, 16)
}

func BenchmarkRCSend64B(b *testing.B) {
	c := newBenchConn(b, nil, false, 14)
	b.ReportAllocs()
	c.run(b, OpSend, 64, 32, 16)
}

// BenchmarkRCWrite64KWindow shows what the send window trades: RC WRITE
// goodput without loss and with 5 % of the frames of both directions
// lost, for fixed windows of 4 KiB packets, none (-1) and the default
// (0: from 12 packets to 64, halving on loss), with the settings of
// BenchmarkRCWrite64K otherwise.
func BenchmarkRCWrite64KWindow(b *testing.B) {
	for _, win := range []int{0, -1, 4, 12, 32, 128} {
		for _, drop := range []float64{0, 0.05} {
			b.Run(fmt.Sprintf("win=%d/drop=%g", win, drop), func(b *testing.B) {
				var fc *fault.Config
				if drop > 0 {
					fc = &fault.Config{Seed: 1, Drop: drop}
				}
				c := newBenchConnWin(b, pipe.Config{MTU: 9000}, 0, win, fc, false, 14)
				b.ReportAllocs()
				c.run(b, OpWrite, 64<<10, 8, 8)
			})
		}
	}
}

// BenchmarkIdleQPHeap reports the heap an idle, connected RC QP costs
// (both ends counted), for 10,000 QP pairs on two devices: with one send
// and one receive slot and one READ/atomic resource each way (rd), with
// 128 slots, and with 16 resources. "fixed-B/qp" estimates what a QP
// costs beyond its work-queue slots: the first figure less one slot's
// share of the difference between the first two.
func BenchmarkIdleQPHeap(b *testing.B) {
	const n = 10000
	for i := 0; i < b.N; i++ {
		one := idleQPHeap(b, n, 1, 1)
		wr128 := idleQPHeap(b, n, 128, 1)
		rd16 := idleQPHeap(b, n, 1, 16)
		slot := (wr128 - one) / 127
		b.ReportMetric(one, "B/qp")
		b.ReportMetric(wr128, "wr128-B/qp")
		b.ReportMetric(rd16, "rd16-B/qp")
		b.ReportMetric(one-slot, "fixed-B/qp")
	}
}

// idleQPHeap creates n connected RC pairs on two Manual devices, checks
// that each works, and returns the heap per QP.
func idleQPHeap(tb testing.TB, n, wr int, rd uint8) float64 {
	s := newSimPair(tb, 9000, nil)
	A, B := newSide(tb, s.a, 1<<16, 2*n+16), newSide(tb, s.b, 1<<16, 2*n+16)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	qas, qbs := make([]*QP, n), make([]*QP, n)
	for i := range qas {
		var err error
		init := QPInit{Type: RC, SendCQ: A.cq, RecvCQ: A.cq, MaxSendWR: wr, MaxRecvWR: wr}
		if qas[i], err = A.pd.CreateQP(init); err != nil {
			tb.Fatal(err)
		}
		init.SendCQ, init.RecvCQ = B.cq, B.cq
		if qbs[i], err = B.pd.CreateQP(init); err != nil {
			tb.Fatal(err)
		}
		connectRd(tb, qas[i], qbs[i], 1, PSN(i), PSN(i*7), AccessRemoteWrite, rd)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	perQP := float64(ms1.HeapAlloc-ms0.HeapAlloc) / float64(2*n)
	// Every pair works: one WRITE each.
	for i, q := range qas {
		if err := q.PostSend(&SendWR{ID: uint64(i), Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(uint64(i%1000)*8, 8)},
			Remote: RemoteAddr{B.mr.Addr() + uint64(i%1000)*8, B.mr.RKey()}}); err != nil {
			tb.Fatal(err)
		}
	}
	got := pollN(tb, s, A.cq, n)
	for _, wc := range got {
		if wc.Status != 0 {
			tb.Fatalf("write on one of %d qps: %v", n, wc.Status)
		}
	}
	runtime.KeepAlive(qbs)
	return perQP
}
