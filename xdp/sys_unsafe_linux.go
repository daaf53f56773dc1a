package xdp

// This file holds the Linux system calls that pass pointers: socket options
// with structures, and the wake-ups made without allocating.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func setsockoptUmemReg(fd int, reg *unix.XDPUmemReg) error {
	return setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(reg), unsafe.Sizeof(*reg))
}

func getsockoptMmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	n := uint32(unsafe.Sizeof(off))
	err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), &n)
	if err == nil && n != uint32(unsafe.Sizeof(off)) {
		err = unix.EINVAL // pre-5.4 layout without the flags words
	}
	return off, err
}

// getsockoptStatistics reads XDP_STATISTICS; older kernels fill in only the
// first three counters.
func getsockoptStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	n := uint32(unsafe.Sizeof(st))
	err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), &n)
	return st, err
}

func getsockoptOptions(fd int) (uint32, error) {
	var opts uint32 // struct xdp_options
	n := uint32(unsafe.Sizeof(opts))
	err := getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), &n)
	return opts, err
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, n *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(n)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// wakeTX is sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0): in copy mode it
// transmits what is on the TX ring; in zero-copy mode it kicks the driver.
func (w *sysSocket) wakeTX() error {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(w.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return wakeErr(e)
}

// wakeRX is recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL): it kicks a
// zero-copy driver that stopped for lack of fill ring entries.
func (w *sysSocket) wakeRX() error {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(w.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return wakeErr(e)
}

func wakeErr(e unix.Errno) error {
	switch e {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN, unix.EINTR:
		return nil
	}
	return e
}

// uintptrOf returns the address of a mapping, for XDP_UMEM_REG.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
