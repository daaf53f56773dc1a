package daemon

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newRingMem creates a memfd of size bytes for rings, maps it and seals
// it against resizing: the client that maps it too cannot make the
// daemon's mapping fault by cutting the file short.
func newRingMem(name string, size int) (int, []byte, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("memfd size: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("memfd seals: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("map rings: %w", err)
	}
	return fd, mem, nil
}

// mapClientMem maps length bytes at offset off of a client's memfd. The
// file must be sealed against shrinking and long enough: the daemon must
// never fault on it. It returns the whole mapping (to unmap) and the
// region's bytes in it.
func mapClientMem(fd int, off, length uint64) ([]byte, []byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, nil, errnoErr{unix.EINVAL, "shared memory: not a memfd that can be sealed"}
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, nil, errnoErr{unix.EINVAL, "shared memory: the memfd is not sealed against shrinking (F_SEAL_SHRINK)"}
	}
	if seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return nil, nil, errnoErr{unix.EINVAL, "shared memory: the memfd is sealed against writing"}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, fmt.Errorf("shared memory: %w", err)
	}
	if length == 0 || off+length < off || off+length > uint64(st.Size) {
		return nil, nil, errnoErr{unix.EINVAL, fmt.Sprintf("shared memory: %d bytes at offset %d of a %d-byte memfd", length, off, st.Size)}
	}
	page := uint64(os.Getpagesize())
	start := off &^ (page - 1)
	n := off + length - start
	if n > 1<<40 {
		return nil, nil, errnoErr{unix.EINVAL, "shared memory: region too large"}
	}
	m, err := unix.Mmap(fd, int64(start), int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, errnoErr{unix.ENOMEM, fmt.Sprintf("shared memory: map: %v", err)}
	}
	d := off - start
	return m, m[d : d+length : d+length], nil
}
