package daemon

import (
	"context"
	"io/fs"
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

// TestRegMRProcessRefused registers process memory in a session whose
// /proc/PID/mem could not be opened (a client of another user, a daemon
// that is not root): EPERM, saying why and what to do.
func TestRegMRProcessRefused(t *testing.T) {
	la, _ := pipe.New(pipe.Config{MTU: 1500})
	d, err := stack.Open(context.Background(), stack.Config{Link: la, MAC: [6]byte{2, 0, 0, 0, 0, 1},
		Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ss := newSession(&Server{cfg: Config{Device: d, Limits: DefaultLimits}}, nil, 1)
	ss.procErr = &fs.PathError{Op: "open", Path: "/proc/1/mem", Err: syscall.EACCES}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	h, _ := ss.add(kindPD, &pdObj{pd: pd})
	buf := make([]byte, 4096)
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	_, _, err = ss.regMR(&proto.RegMR{PD: h, Kind: proto.MemProcess, Addr: addr, IOVA: addr, Length: 4096, Access: 1}, nil)
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
