package oob

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePort returns a loopback address nobody listens on (for a moment).
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestDialRetriesUntilListening(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   net.Conn
		err error
	}
	dialed := make(chan res, 1)
	go func() {
		c, err := Dial(ctx, addr, 5*time.Millisecond)
		dialed <- res{c, err}
	}()
	// The client starts first; its first attempts are refused.
	srv, err := Listen(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if _, err := r.c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("server read %q, %v", buf, err)
	}
}

func TestDialGivesUp(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dial(ctx, addr, time.Millisecond); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial error = %v, want context.Canceled", err)
	}
}

// TestDialRefusedUntilDeadline: a dial refused until the deadline says
// so, and still wraps the context's error.
func TestDialRefusedUntilDeadline(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, addr, time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) ||
		!strings.Contains(err.Error(), "connection refused (kept trying for") {
		t.Fatalf("Dial error = %v, want connection refused and the deadline", err)
	}
}

func TestListenCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Listen(ctx, "127.0.0.1:0")
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen error = %v, want context.Canceled", err)
	}
}

func TestGuard(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	done := Guard(ctx, a)
	err := done(ReadMsg(a, make([]byte, 1))) // nothing is ever written
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want context.DeadlineExceeded", err)
	}
	// The deadline is gone afterwards.
	go b.Write([]byte("x"))
	if err := ReadMsg(a, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// A peer that closes early gives ErrUnexpectedEOF.
	b.Close()
	if err := ReadMsg(a, make([]byte, 1)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error = %v, want io.ErrUnexpectedEOF", err)
	}
}
