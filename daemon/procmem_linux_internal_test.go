package daemon

import (
	"context"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// pdSession is a session of a manual device on a pipe, with the limits
// lim and one PD, whose handle it returns.
func pdSession(t *testing.T, lim Limits) (*session, uint32) {
	t.Helper()
	la, _ := pipe.New(pipe.Config{MTU: 1500})
	d, err := stack.Open(context.Background(), stack.Config{Link: la, MAC: [6]byte{2, 0, 0, 0, 0, 1},
		Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ss := newSession(&Server{cfg: Config{Device: d, Limits: lim}}, nil, 1)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	h, _ := ss.add(kindPD, &pdObj{pd: pd})
	return ss, h
}

// TestRegMRProcessRefused registers process memory in a session whose
// /proc/PID/mem could not be opened (a client of another user, a daemon
// that is not root): EPERM, saying why and what to do.
func TestRegMRProcessRefused(t *testing.T) {
	ss, h := pdSession(t, DefaultLimits)
	ss.procErr = &fs.PathError{Op: "open", Path: "/proc/1/mem", Err: syscall.EACCES}
	buf := make([]byte, 4096)
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	_, _, err := ss.regMR(&proto.RegMR{PD: h, Kind: proto.MemProcess, Addr: addr, IOVA: addr, Length: 4096, Access: 1}, nil)
	if errnoOf(err) != unix.EPERM || !strings.Contains(err.Error(), "permission denied") ||
		!strings.Contains(err.Error(), "as root") {
		t.Fatalf("reg mr without /proc/PID/mem: %v (%v)", err, errnoOf(err))
	}

	// With the file: ranges that are empty or wrap are EINVAL, unmapped
	// ones EFAULT.
	f, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	for _, c := range []struct {
		addr, n uint64
		errno   syscall.Errno
	}{{addr, 0, unix.EINVAL}, {^uint64(0) - 10, 100, unix.EINVAL}, {1 << 63, 8, unix.EINVAL}, {8, 8, unix.EFAULT}, {addr, 4096, 0}} {
		e := readable(f, c.addr, c.n)
		if (e == nil) != (c.errno == 0) || (e != nil && errnoOf(e) != c.errno) {
			t.Errorf("readable(%#x, %d): %v, want errno %d", c.addr, c.n, e, c.errno)
		}
	}
}

// TestRegMROnDemand: IBV_ACCESS_ON_DEMAND regions of process memory are
// not checked ahead (an address not mapped yet registers; a range that
// wraps or passes the offsets does not), not counted toward the
// registered bytes, and the implicit region (address 0, length
// SIZE_MAX) is the whole address space. (ibv_rc_pingpong -O in
// test/daemon moves data through one.)
func TestRegMROnDemand(t *testing.T) {
	lim := DefaultLimits
	lim.MRBytes = 1 << 20
	ss, h := pdSession(t, lim)
	var err error
	if ss.procMem, err = os.OpenFile("/proc/self/mem", os.O_RDWR, 0); err != nil {
		t.Skip(err)
	}
	defer ss.procMem.Close()
	const odp = accessOnDemand | 1
	for _, c := range []struct {
		addr, n uint64
		access  uint32
		errno   syscall.Errno
	}{
		{8, 4096, odp, 0},          // not mapped: on demand, fine
		{8, 4096, 1, unix.EFAULT},  // not on demand: refused
		{1 << 40, 1 << 30, odp, 0}, // past the 1 MiB limit: not counted
		{1 << 40, 1 << 30, 1, unix.ENOMEM},
		{^uint64(0) - 10, 100, odp, unix.EINVAL},
		{1 << 62, 1 << 62, odp, unix.EINVAL},
		{0, 0, odp, unix.EINVAL},
	} {
		_, _, err := ss.regMR(&proto.RegMR{PD: h, Kind: proto.MemProcess, Addr: c.addr, IOVA: c.addr, Length: c.n, Access: c.access}, nil)
		if errnoOf(err) != c.errno && !(c.errno == 0 && err == nil) {
			t.Errorf("reg mr %d bytes at %#x, access %#x: %v, want errno %d", c.n, c.addr, c.access, err, c.errno)
		}
	}
	r, _, err := ss.regMR(&proto.RegMR{PD: h, Kind: proto.MemProcess, Addr: 0, IOVA: 0, Length: ^uint64(0), Access: odp}, nil)
	if err != nil {
		t.Fatalf("implicit region: %v", err)
	}
	mr := r.(*proto.RegMRResp)
	o, err := get[*mrObj](ss, mr.MR)
	if err != nil {
		t.Fatal(err)
	}
	if o.mr.Addr() != 0 || o.mr.Len() != math.MaxInt64 || o.bytes != 0 {
		t.Fatalf("implicit region: address %#x, %d bytes, %d counted", o.mr.Addr(), o.mr.Len(), o.bytes)
	}
	if ss.mrBytes != 0 {
		t.Fatalf("on-demand regions counted: %d bytes", ss.mrBytes)
	}
}
