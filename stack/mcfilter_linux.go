package stack

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ifaceMulticast is an interface's multicast filter: the Ethernet
// addresses the kernel's driver accepts besides its own, added and
// deleted with SIOCADDMULTI and SIOCDELMULTI (as `ip maddr` does) on a
// socket opened with the device, in its network namespace. Close deletes
// what is left, so that the interface is as it was.
type ifaceMulticast struct {
	name string
	fd   int
	mu   sync.Mutex
	set  map[[6]byte]bool
}

func newIfaceMulticast(name string) (*ifaceMulticast, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("multicast filter of %s: %w", name, err)
	}
	return &ifaceMulticast{name: name, fd: fd, set: make(map[[6]byte]bool)}, nil
}

// ifreqHW is struct ifreq with ifr_hwaddr: the name, then a struct
// sockaddr (family AF_UNSPEC, the address in sa_data).
type ifreqHW struct {
	name   [unix.IFNAMSIZ]byte
	family uint16
	data   [14]byte
	_      [8]byte // the rest of the union
}

func (m *ifaceMulticast) ioctl(req uint, mac [6]byte) error {
	var r ifreqHW
	copy(r.name[:], m.name)
	r.family = unix.AF_UNSPEC
	copy(r.data[:], mac[:])
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(m.fd), uintptr(req), uintptr(unsafe.Pointer(&r)))
	if e != 0 {
		return e
	}
	return nil
}

// AddMulticast implements MulticastFilter.
func (m *ifaceMulticast) AddMulticast(mac [6]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.set[mac] {
		return nil
	}
	if err := m.ioctl(unix.SIOCADDMULTI, mac); err != nil {
		return fmt.Errorf("add %x to the multicast list of %s: %w", mac, m.name, err)
	}
	m.set[mac] = true
	return nil
}

// DelMulticast implements MulticastFilter.
func (m *ifaceMulticast) DelMulticast(mac [6]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.set[mac] {
		return nil
	}
	delete(m.set, mac)
	if err := m.ioctl(unix.SIOCDELMULTI, mac); err != nil {
		return fmt.Errorf("delete %x from the multicast list of %s: %w", mac, m.name, err)
	}
	return nil
}

// Close deletes the addresses still added and closes the socket.
func (m *ifaceMulticast) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for mac := range m.set {
		m.ioctl(unix.SIOCDELMULTI, mac) // the interface may be gone already
	}
	clear(m.set)
	return unix.Close(m.fd)
}
