//go:build !linux

package xdp

import (
	"fmt"
	"time"
)

type sysSocket struct{}

// Open fails: AF_XDP exists on Linux only.
func Open(cfg Config) (*Socket, error) {
	return nil, fmt.Errorf("open AF_XDP socket: %w", ErrUnsupported)
}

// FD returns -1.
func (s *Socket) FD() int { return -1 }

// Wait fails: AF_XDP exists on Linux only.
func (s *Socket) Wait(timeout time.Duration) error {
	return fmt.Errorf("wait on AF_XDP socket: %w", ErrUnsupported)
}

// Stats returns the socket's own counters.
func (s *Socket) Stats() (Stats, error) { return s.counters(), nil }

// Close marks the socket closed.
func (s *Socket) Close() error {
	s.closed = true
	return nil
}
