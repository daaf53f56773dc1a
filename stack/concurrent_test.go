package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
)

// openRunning opens two devices with engine goroutines, on real time,
// joined by a pipe (wrapped with faults when given).
func openRunning(t testing.TB, mtu int, faults *fault.Config, busyPoll bool) (a, b *Device) {
	return openRunningCfg(t, pipe.Config{MTU: mtu}, 0, 0, faults, busyPoll)
}

func openRunningCfg(t testing.TB, pc pipe.Config, batch, window int, faults *fault.Config, busyPoll bool, mods ...func(*Config)) (a, b *Device) {
	t.Helper()
	pa, pb := pipe.New(pc)
	var la, lb Link = pa, pb
	if faults != nil {
		fb := *faults
		fb.Seed ^= 0x5555
		la, lb = fault.Wrap(pa, *faults), fault.Wrap(pb, fb)
	}
	nb := StaticNeighbors{ipA: macA, ipB: macB, ip6A: macA, ip6B: macB}
	var err error
	ca := Config{Link: la, MAC: macA, Addrs: []netip.Addr{ipA, ip6A}, Neighbors: nb, BusyPoll: busyPoll, Batch: batch, SendWindow: window}
	cb := Config{Link: lb, MAC: macB, Addrs: []netip.Addr{ipB, ip6B}, Neighbors: nb, BusyPoll: busyPoll, Batch: batch, SendWindow: window}
	for _, m := range mods {
		m(&ca)
		m(&cb)
	}
	a, err = Open(context.Background(), ca)
	if err != nil {
		t.Fatal(err)
	}
	b, err = Open(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// checkNoGoroutines fails if goroutines of this package are still alive.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	var buf []byte
	for i := 0; i < 200; i++ {
		buf = make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		if !bytes.Contains(buf, []byte("uroce/stack.(*engine).run")) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "uroce/stack.(*engine)") {
			leaked = append(leaked, g)
		}
	}
	t.Fatalf("engine goroutines left after Close:\n%s", strings.Join(leaked, "\n\n"))
}

// TestConcurrentVerbs drives two running devices from many goroutines at
// once: each owns a connected RC pair and checks its data, while others
// register and deregister memory and create and destroy QPs.
func TestConcurrentVerbs(t *testing.T) {
	t.Cleanup(func() { checkNoGoroutines(t) })
	runConcurrent(t, nil, 8, 100)
}

// TestConcurrentVerbsLossy is the same over a lossy pipe on real time.
func TestConcurrentVerbsLossy(t *testing.T) {
	t.Cleanup(func() { checkNoGoroutines(t) })
	runConcurrent(t, &fault.Config{Seed: 7, Drop: 0.02, Dup: 0.01, Reorder: 0.01, Corrupt: 0.001}, 4, 50)
}

func runConcurrent(t *testing.T, faults *fault.Config, workers, rounds int) {
	if longTests() {
		rounds *= 10
	}
	da, db := openRunning(t, 9000, faults, false)
	defer func() {
		da.Close()
		db.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pdA, _ := da.AllocPD()
	pdB, _ := db.AllocPD()
	var wg sync.WaitGroup
	errc := make(chan error, workers+2)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			if err := concurrentWorker(ctx, w, pdA, pdB, rounds); err != nil {
				errc <- fmt.Errorf("worker %d: %w", w, err)
			}
		}(w)
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		cq, _ := da.CreateCQ(4)
		for {
			select {
			case <-stop:
				cq.Destroy()
				return
			default:
			}
			mr, err := pdA.RegisterMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteWrite)
			if err != nil {
				errc <- err
				return
			}
			q, err := pdA.CreateQP(QPInit{Type: RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
			if err != nil {
				errc <- err
				return
			}
			q.ToInit(InitAttr{})
			if err := q.Destroy(); err != nil {
				errc <- err
			}
			if err := mr.Deregister(); err != nil {
				errc <- err
			}
		}
	}()
	wg.Wait()
	close(stop)
	churn.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		ca, cb := da.Counters(), db.Counters()
		t.Logf("A: %v", ca.Map())
		t.Logf("B: %v", cb.Map())
	}
}

func concurrentWorker(ctx context.Context, w int, pdA, pdB *PD, rounds int) error {
	cqA, err := pdA.dev.CreateCQ(256)
	if err != nil {
		return err
	}
	cqB, err := pdB.dev.CreateCQ(256)
	if err != nil {
		return err
	}
	bufA, bufB := make([]byte, 1<<20), make([]byte, 1<<20)
	acc := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	mrA, _ := pdA.RegisterMR(bufA, acc)
	mrB, _ := pdB.RegisterMR(bufB, acc)
	init := QPInit{Type: RC, MaxSendWR: 64, MaxRecvWR: 64}
	init.SendCQ, init.RecvCQ = cqA, cqA
	qa, err := pdA.CreateQP(init)
	if err != nil {
		return err
	}
	init.SendCQ, init.RecvCQ = cqB, cqB
	qb, err := pdB.CreateQP(init)
	if err != nil {
		return err
	}
	for i, c := range []struct {
		q, peer *QP
		gid     netip.Addr
	}{{qa, qb, netip.AddrFrom16(ipB.As16())}, {qb, qa, netip.AddrFrom16(ipA.As16())}} {
		if err := c.q.ToInit(InitAttr{AccessFlags: acc &^ AccessLocalWrite}); err != nil {
			return err
		}
		if err := c.q.ToRTR(RTRAttr{DestQPN: c.peer.QPN(), AH: AHAttr{DGID: c.gid, SGIDIndex: 1}, RQPSN: PSN(100 * i), MaxDestRdAtomic: 4, MinRNRTimer: 1}); err != nil {
			return err
		}
		if err := c.q.ToRTS(RTSAttr{SQPSN: PSN(100 * (1 - i)), Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}); err != nil {
			return err
		}
	}
	wcs := make([]WC, 16)
	wait := func(cq *CQ, n int) ([]WC, error) {
		var got []WC
		for len(got) < n {
			if err := cq.Wait(ctx); err != nil {
				return got, err
			}
			k := cq.Poll(wcs)
			got = append(got, wcs[:k]...)
		}
		return got, nil
	}
	for r := 0; r < rounds; r++ {
		size := 1 + (r*7919+w*104729)%200000
		fill(bufA[:size], byte(r+w))
		if err := qb.PostRecv(&RecvWR{ID: uint64(r), SG: []SGE{mrB.SGE(512<<10, 300000)}}); err != nil {
			return err
		}
		wrs := []SendWR{
			{ID: 1, Op: OpWrite, SG: []SGE{mrA.SGE(0, uint32(size))}, Remote: RemoteAddr{mrB.Addr(), mrB.RKey()}},
			{ID: 2, Op: OpSendWithImm, Imm: uint32(r), Flags: SendSignaled, SG: []SGE{mrA.SGE(0, uint32(size))}},
			{ID: 3, Op: OpRead, Flags: SendSignaled, SG: []SGE{mrA.SGE(256<<10, uint32(size))}, Remote: RemoteAddr{mrB.Addr(), mrB.RKey()}},
		}
		if _, err := qa.PostSendBatch(wrs); err != nil {
			return err
		}
		got, err := wait(cqA, 2)
		if err != nil {
			return err
		}
		if got[0].ID != 2 || got[1].ID != 3 || got[0].Status != 0 || got[1].Status != 0 {
			return fmt.Errorf("round %d: completions %+v", r, got)
		}
		rc, err := wait(cqB, 1)
		if err != nil {
			return err
		}
		if rc[0].ID != uint64(r) || rc[0].ByteLen != uint32(size) || rc[0].Imm != uint32(r) {
			return fmt.Errorf("round %d: receive %+v", r, rc[0])
		}
		if !bytes.Equal(bufB[:size], bufA[:size]) || !bytes.Equal(bufB[512<<10:512<<10+size], bufA[:size]) || !bytes.Equal(bufA[256<<10:256<<10+size], bufA[:size]) {
			return fmt.Errorf("round %d: data differs", r)
		}
	}
	// Tear down as an application would: error, drain, destroy.
	qa.ToErr()
	qb.ToErr()
	for _, q := range []*QP{qa, qb} {
		if err := q.Destroy(); err != nil {
			return err
		}
	}
	if err := qa.PostSend(&SendWR{ID: 9, Op: OpSend}); !errors.Is(err, ErrDestroyed) {
		return fmt.Errorf("post on a destroyed qp: %v", err)
	}
	for _, cq := range []*CQ{cqA, cqB} {
		for cq.Poll(wcs) > 0 {
		}
		if err := cq.Destroy(); err != nil {
			return err
		}
	}
	if err := mrA.Deregister(); err != nil {
		return err
	}
	return mrB.Deregister()
}
