package stack

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/link/pipe"
)

// Once MR.Deregister or QP.Destroy returns, no engine reads or writes
// the memory concerned, whatever is in flight: the application may
// reuse or unmap it at once (ibv_dereg_mr's contract, and what the
// daemon relies on when a client's memory goes away). These tests run
// the engines on their goroutines, overwrite the memory with a marker
// as soon as the call returns, and look for the marker where the stack
// could have carried it, or for bytes that replaced it.

const (
	fenceSize   = 8 << 20
	fenceMarker = 0xEE
)

// fencePair is two running devices joined by a pipe, with one buffer
// registered on each side per round.
type fencePair struct {
	a, b   *Device
	pa, pb *PD
	ca, cb *CQ
}

func newFencePair(t *testing.T) *fencePair {
	t.Helper()
	f := &fencePair{}
	f.a, f.b = openRunningCfg(t, pipe.Config{MTU: 9000}, 0, 0, nil, false)
	t.Cleanup(func() {
		f.a.Close()
		f.b.Close()
	})
	var err error
	if f.pa, err = f.a.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if f.pb, err = f.b.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if f.ca, err = f.a.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if f.cb, err = f.b.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	return f
}

// qps returns a connected RC pair with a short ACK timeout, so that a
// request whose peer vanished fails quickly.
func (f *fencePair) qps(t *testing.T) (qa, qb *QP) {
	t.Helper()
	mk := func(pd *PD, cq *CQ) *QP {
		q, err := pd.CreateQP(QPInit{Type: RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb = mk(f.pa, f.ca), mk(f.pb, f.cb)
	acc := AccessRemoteWrite | AccessRemoteRead
	for i, x := range []struct {
		q, peer *QP
		gid     netip.Addr
	}{{qa, qb, netip.AddrFrom16(ipB.As16())}, {qb, qa, netip.AddrFrom16(ipA.As16())}} {
		if err := x.q.ToInit(InitAttr{AccessFlags: acc}); err != nil {
			t.Fatal(err)
		}
		if err := x.q.ToRTR(RTRAttr{DestQPN: x.peer.QPN(), AH: AHAttr{DGID: x.gid, SGIDIndex: 1}, PathMTU: MTU4096,
			RQPSN: PSN(100 * i), MaxDestRdAtomic: 4, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := x.q.ToRTS(RTSAttr{SQPSN: PSN(100 * (1 - i)), Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}); err != nil {
			t.Fatal(err)
		}
	}
	return qa, qb
}

func (f *fencePair) mr(t *testing.T, pd *PD, fillWith byte) (*MR, []byte) {
	t.Helper()
	buf := bytes.Repeat([]byte{fillWith}, fenceSize)
	mr, err := pd.RegisterMR(buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	return mr, buf
}

// waitOne waits for one completion on cq.
func waitOne(t *testing.T, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wcs := make([]WC, 1)
	for {
		if cq.Poll(wcs) == 1 {
			return wcs[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func overwrite(b []byte) {
	for i := range b {
		b[i] = fenceMarker
	}
}

func allMarker(b []byte) int {
	for i, c := range b {
		if c != fenceMarker {
			return i
		}
	}
	return -1
}

// pause varies where in the transfer the call under test comes.
func pause(round int) { time.Sleep(time.Duration(round%5) * 300 * time.Microsecond) }

func TestDeregisterStopsReadResponses(t *testing.T) {
	f := newFencePair(t)
	okN, failN := 0, 0
	for round := 0; round < 20; round++ {
		qa, qb := f.qps(t)
		local, lbuf := f.mr(t, f.pa, 0)
		remote, rbuf := f.mr(t, f.pb, 0x11)
		if err := qa.PostSend(&SendWR{ID: 1, Op: OpRead, Flags: SendSignaled, SG: []SGE{local.SGE(0, fenceSize)},
			Remote: RemoteAddr{remote.Addr(), remote.RKey()}}); err != nil {
			t.Fatal(err)
		}
		pause(round)
		if err := remote.Deregister(); err != nil {
			t.Fatal(err)
		}
		overwrite(rbuf)
		wc := waitOne(t, f.ca)
		if i := bytes.IndexByte(lbuf, fenceMarker); i >= 0 {
			t.Fatalf("round %d: the READ (%v) carried bytes written after Deregister returned, from offset %d", round, wc.Status, i)
		}
		switch wc.Status {
		case WCSuccess:
			okN++
			if bytes.Count(lbuf, []byte{0x11}) != fenceSize {
				t.Fatalf("round %d: READ succeeded with other data", round)
			}
		case WCRemAccessErr:
			failN++
		default:
			t.Fatalf("round %d: READ completed with %v, want success or %v", round, wc.Status, WCRemAccessErr)
		}
		for _, q := range []*QP{qa, qb} {
			if err := q.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		if err := local.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d READs completed before Deregister, %d failed with a remote access error", okN, failN)
}

func TestDeregisterStopsWrites(t *testing.T) {
	f := newFencePair(t)
	for round := 0; round < 10; round++ {
		qa, qb := f.qps(t)
		local, _ := f.mr(t, f.pa, 0x22)
		remote, rbuf := f.mr(t, f.pb, 0)
		if err := qa.PostSend(&SendWR{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{local.SGE(0, fenceSize)},
			Remote: RemoteAddr{remote.Addr(), remote.RKey()}}); err != nil {
			t.Fatal(err)
		}
		pause(round)
		if err := remote.Deregister(); err != nil {
			t.Fatal(err)
		}
		overwrite(rbuf)
		wc := waitOne(t, f.ca)
		if wc.Status != WCSuccess && wc.Status != WCRemAccessErr {
			t.Fatalf("round %d: WRITE completed with %v", round, wc.Status)
		}
		if i := allMarker(rbuf); i >= 0 {
			t.Fatalf("round %d: byte %d written after Deregister returned (WRITE %v)", round, i, wc.Status)
		}
		qa.Destroy()
		qb.Destroy()
		local.Deregister()
	}
}

func TestDeregisterStopsSends(t *testing.T) {
	f := newFencePair(t)
	for round := 0; round < 10; round++ {
		qa, qb := f.qps(t)
		local, _ := f.mr(t, f.pa, 0x33)
		recv, rbuf := f.mr(t, f.pb, 0)
		if err := qb.PostRecv(&RecvWR{ID: 7, SG: []SGE{recv.SGE(0, fenceSize)}}); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend(&SendWR{ID: 1, Op: OpSend, Flags: SendSignaled, SG: []SGE{local.SGE(0, fenceSize)}}); err != nil {
			t.Fatal(err)
		}
		pause(round)
		if err := recv.Deregister(); err != nil {
			t.Fatal(err)
		}
		overwrite(rbuf)
		wc := waitOne(t, f.ca)
		rwc := waitOne(t, f.cb)
		if (wc.Status == WCSuccess) != (rwc.Status == WCSuccess) {
			t.Fatalf("round %d: SEND %v, receive %v", round, wc.Status, rwc.Status)
		}
		if wc.Status != WCSuccess && rwc.Status != WCLocProtErr {
			t.Fatalf("round %d: SEND %v, receive %v, want %v", round, wc.Status, rwc.Status, WCLocProtErr)
		}
		if i := allMarker(rbuf); i >= 0 {
			t.Fatalf("round %d: byte %d received after Deregister returned", round, i)
		}
		qa.Destroy()
		qb.Destroy()
		local.Deregister()
	}
}

// TestDestroyStopsTransfers destroys the responder's QP during a READ
// (its region stays registered) and the requester's QP during a READ:
// neither reads nor writes the memory afterwards.
func TestDestroyStopsTransfers(t *testing.T) {
	f := newFencePair(t)
	for round := 0; round < 6; round++ {
		qa, qb := f.qps(t)
		local, lbuf := f.mr(t, f.pa, 0)
		remote, rbuf := f.mr(t, f.pb, 0x44)
		if err := qa.PostSend(&SendWR{ID: 1, Op: OpRead, Flags: SendSignaled, SG: []SGE{local.SGE(0, fenceSize)},
			Remote: RemoteAddr{remote.Addr(), remote.RKey()}}); err != nil {
			t.Fatal(err)
		}
		pause(round)
		if round%2 == 0 {
			// The responder goes away.
			if err := qb.Destroy(); err != nil {
				t.Fatal(err)
			}
			overwrite(rbuf)
			wc := waitOne(t, f.ca)
			if wc.Status != WCSuccess && wc.Status != WCRetryExcErr {
				t.Fatalf("round %d: READ %v", round, wc.Status)
			}
			if i := bytes.IndexByte(lbuf, fenceMarker); i >= 0 {
				t.Fatalf("round %d: READ (%v) carried bytes written after Destroy returned, from offset %d", round, wc.Status, i)
			}
			qa.Destroy()
		} else {
			// The requester goes away; the responder sends on.
			if err := qa.Destroy(); err != nil {
				t.Fatal(err)
			}
			overwrite(lbuf)
			sent := f.b.Counters().SentPkts
			for i := 0; i < 200; i++ {
				time.Sleep(5 * time.Millisecond)
				if s := f.b.Counters().SentPkts; s == sent {
					break
				} else {
					sent = s
				}
			}
			if i := allMarker(lbuf); i >= 0 {
				t.Fatalf("round %d: byte %d of the READ's buffer written after Destroy returned", round, i)
			}
			qb.Destroy()
		}
		local.Deregister()
		remote.Deregister()
	}
}

// TestDeallocExcludesCreation races objects created from a PD against
// its Dealloc: once Dealloc succeeded nothing can be created from it,
// and while anything exists Dealloc fails with ErrBusy.
func TestDeallocExcludesCreation(t *testing.T) {
	f := newFencePair(t)
	buf := make([]byte, 4096)
	for round := 0; round < 200; round++ {
		pd, err := f.a.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		var wg, started sync.WaitGroup
		deallocated := make(chan struct{})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			started.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 100; k++ {
					if k == 1 {
						started.Done()
					}
					mr, err := pd.RegisterMR(buf, AccessLocalWrite)
					if err != nil {
						if !errors.Is(err, ErrDestroyed) {
							t.Errorf("register mr: %v", err)
						}
						if k == 0 {
							started.Done()
						}
						return
					}
					select {
					case <-deallocated:
						t.Errorf("round %d: an MR was registered on a deallocated PD", round)
						return
					default:
					}
					if err := mr.Deregister(); err != nil {
						t.Errorf("deregister: %v", err)
					}
				}
			}()
		}
		started.Wait()
		for {
			err := pd.Dealloc()
			if err == nil {
				close(deallocated)
				break
			}
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("dealloc: %v", err)
			}
		}
		wg.Wait()
		if err := pd.Dealloc(); !errors.Is(err, ErrDestroyed) {
			t.Fatalf("second dealloc: %v, want ErrDestroyed", err)
		}
	}
	// A PD with an MR cannot be deallocated; a CQ with a QP cannot be
	// destroyed; and neither takes new objects once gone.
	pd, _ := f.a.AllocPD()
	mr, err := pd.RegisterMR(buf, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Fatalf("dealloc with an MR: %v, want ErrBusy", err)
	}
	mr.Deregister()
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(QPInit{Type: RC, SendCQ: f.ca, RecvCQ: f.ca, MaxSendWR: 1, MaxRecvWR: 1}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("create qp on a deallocated pd: %v", err)
	}
	cq, _ := f.a.CreateCQ(4)
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pa.CreateQP(QPInit{Type: RC, SendCQ: cq, RecvCQ: f.ca, MaxSendWR: 1, MaxRecvWR: 1}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("create qp on a destroyed cq: %v", err)
	}
	if err := f.ca.Destroy(); err != nil {
		t.Fatalf("destroy cq after the failed create qp: %v", err)
	}
}

// TestDeregisterWaitsForTheBatch holds an engine's batch as the engine
// does while it works: Deregister takes the region out of the table at
// once, but returns only when the batch is over, since the batch may be
// copying from the region.
func TestDeregisterWaitsForTheBatch(t *testing.T) {
	f := newFencePair(t)
	mr, _ := f.mr(t, f.pb, 0)
	key := mr.LKey()
	e := f.b.engines[0]
	e.batchMu.Lock()
	done := make(chan error, 1)
	go func() { done <- mr.Deregister() }()
	for f.b.mrs.lookup(key) != nil {
		runtime.Gosched()
	}
	select {
	case err := <-done:
		e.batchMu.Unlock()
		t.Fatalf("Deregister returned (%v) while a batch was in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	e.batchMu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
