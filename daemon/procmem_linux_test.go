package daemon_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// newProcEnd is newEnd with the region in the client's own memory (a
// plain Go buffer, not one of AllocBuffer): the client registers it as
// process memory, which the daemon reaches through /proc/PID/mem.
func newProcEnd(t *testing.T, dev verbs.Device, size int) *end {
	t.Helper()
	e := &end{dev: dev, buf: make([]byte, size)}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	acc := stack.AccessLocalWrite | stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic
	if e.mr, err = e.pd.RegisterMR(e.buf, acc); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestDaemonProcessMemory runs SEND, WRITE, READ and atomics between
// two clients whose regions are their own memory.
func TestDaemonProcessMemory(t *testing.T) {
	p := newPair(t)
	A, B := newProcEnd(t, open(t, p.sa), 1<<20), newProcEnd(t, open(t, p.sb), 1<<20)
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)
	ok := func(what string, wcs []stack.WC) {
		t.Helper()
		for _, wc := range wcs {
			if wc.Status != stack.WCSuccess {
				t.Fatalf("%s: %+v", what, wc)
			}
		}
	}

	// SEND with three SGEs, then inline, into receives of B.
	fill(A.buf[:20000], 1)
	if err := qb.PostRecv(&stack.RecvWR{ID: 50, SG: []stack.SGE{B.mr.SGE(0, 30000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(&stack.RecvWR{ID: 51, SG: []stack.SGE{B.mr.SGE(40000, 100)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{A.mr.SGE(0, 5000), A.mr.SGE(5000, 5000), A.mr.SGE(10000, 10000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled | stack.SendInline,
		SG: []stack.SGE{A.mr.SGE(100, 60)}}); err != nil {
		t.Fatal(err)
	}
	ok("send", waitN(t, A.cq, 2))
	wb := waitN(t, B.cq, 2)
	ok("receive", wb)
	if wb[0].ByteLen != 20000 || wb[1].ByteLen != 60 || !bytes.Equal(B.buf[:20000], A.buf[:20000]) ||
		!bytes.Equal(B.buf[40000:40060], A.buf[100:160]) {
		t.Fatalf("send data differs (%+v)", wb)
	}
	// And back: B sends from its memory.
	fill(B.buf[50000:60000], 2)
	if err := qa.PostRecv(&stack.RecvWR{ID: 52, SG: []stack.SGE{A.mr.SGE(60000, 10000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostSend(&verbs.SendWR{ID: 3, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []stack.SGE{B.mr.SGE(50000, 10000)}}); err != nil {
		t.Fatal(err)
	}
	ok("send back", append(waitN(t, B.cq, 1), waitN(t, A.cq, 1)...))
	if !bytes.Equal(A.buf[60000:70000], B.buf[50000:60000]) {
		t.Fatal("send back: data differs")
	}

	// WRITE into B, READ it back into A; atomics on B.
	fill(A.buf[100000:300000], 9)
	wrs := []verbs.SendWR{
		{ID: 4, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(100000, 200000)},
			Remote: stack.RemoteAddr{Addr: B.mr.Addr() + 300000, RKey: B.mr.RKey()}},
		{ID: 5, Op: stack.OpRead, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(500000, 200000)},
			Remote: stack.RemoteAddr{Addr: B.mr.Addr() + 300000, RKey: B.mr.RKey()}},
	}
	if n, err := qa.PostSendBatch(wrs); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	binary.LittleEndian.PutUint64(B.buf[800000:], 41)
	for _, wr := range []verbs.SendWR{
		{ID: 6, Op: stack.OpFetchAdd, CompareAdd: 1, SG: []stack.SGE{A.mr.SGE(900000, 8)}},
		{ID: 7, Op: stack.OpCompareSwap, CompareAdd: 42, Swap: 7, SG: []stack.SGE{A.mr.SGE(900008, 8)}},
	} {
		wr.Flags = stack.SendSignaled
		wr.Remote = stack.RemoteAddr{Addr: B.mr.Addr() + 800000, RKey: B.mr.RKey()}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	ok("write, read, atomics", waitN(t, A.cq, 4))
	if !bytes.Equal(B.buf[300000:500000], A.buf[100000:300000]) || !bytes.Equal(A.buf[500000:700000], A.buf[100000:300000]) {
		t.Fatal("write or read data differs")
	}
	r := func(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if r(A.buf, 900000) != 41 || r(A.buf, 900008) != 42 || r(B.buf, 800000) != 7 {
		t.Fatalf("atomics: %d %d %d", r(A.buf, 900000), r(A.buf, 900008), r(B.buf, 800000))
	}
	if ca, cb := p.a.Counters(), p.b.Counters(); ca.BackingErr != 0 || cb.BackingErr != 0 {
		t.Errorf("backing_err %d, %d", ca.BackingErr, cb.BackingErr)
	}

	// Once deregistered, B's memory is not written: a WRITE to it is a
	// remote access error.
	if err := B.mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	clear(B.buf)
	if err := qa.PostSend(&verbs.SendWR{ID: 8, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 8192)},
		Remote: stack.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, A.cq, 1); wc[0].Status != stack.WCRemAccessErr {
		t.Fatalf("write to a deregistered region: %+v", wc[0])
	}
	if i := bytes.IndexFunc(B.buf, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte %d written after deregistration", i)
	}
	runtime.KeepAlive(A.buf)
	runtime.KeepAlive(B.buf)
}

// TestDaemonProcessMemoryUnmapped registers memory whose last page is
// not mapped: the daemon refuses it with EFAULT.
func TestDaemonProcessMemoryUnmapped(t *testing.T) {
	p := newPair(t)
	dev := open(t, p.sa)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	// Unmap the second page behind the slice's back (unix.Munmap takes
	// whole mappings only); m is not touched again.
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&m[page])), uintptr(page), 0); e != 0 {
		t.Fatal(e)
	}
	defer unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&m[0])), uintptr(page), 0)
	if _, err := pd.RegisterMR(m, stack.AccessLocalWrite); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("register partly unmapped memory: %v", err)
	}
	if _, err := pd.RegisterMR(m[:page], stack.AccessLocalWrite); err != nil {
		t.Fatalf("register the mapped page: %v", err)
	}
}
