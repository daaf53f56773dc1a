package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Port is the TCP port on which the stock pingpong and perftest tools
// exchange their connection data by default.
const Port = 18515

// Listen accepts exactly one connection on addr (for example ":18515") and
// closes the listener, as the stock servers do. It gives up when ctx ends.
func Listen(ctx context.Context, addr string) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("oob listen: %w", err)
	}
	defer ln.Close()
	return Accept(ctx, ln)
}

// Accept waits for one connection on ln. It gives up when ctx ends; ln is
// left open.
func Accept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() {
		if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
			d.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("oob accept: %w", ctx.Err())
		}
		return nil, fmt.Errorf("oob accept: %w", err)
	}
	return c, nil
}

// Dial connects to addr, retrying every retry (100 ms when zero) while the
// connection is refused or the host is unreachable (no ARP answer yet), until
// ctx ends. The stock clients try once; the retry lets a client start before
// its server is up.
func Dial(ctx context.Context, addr string, retry time.Duration) (net.Conn, error) {
	if retry <= 0 {
		retry = 100 * time.Millisecond
	}
	var d net.Dialer
	start := time.Now()
	var last error // the last refusal, for the error when ctx ends
	gaveUp := func() error {
		cause := ctx.Err()
		if cause == nil { // the dial's own deadline, ctx's, came a moment before ctx's timer
			cause = context.DeadlineExceeded
		}
		if last == nil {
			return fmt.Errorf("oob dial %s: %w", addr, cause)
		}
		return fmt.Errorf("oob dial %s: %w (kept trying for %v: %w)", addr, unwrapOp(last), time.Since(start).Round(100*time.Millisecond), cause)
	}
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, gaveUp()
		}
		if !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH)) {
			return nil, fmt.Errorf("oob dial %s: %w", addr, err)
		}
		last = err
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, gaveUp()
		case <-t.C:
		}
	}
}

// unwrapOp is the system call's error inside a net.OpError ("connection
// refused"), which already names the address.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sc *os.SyscallError
		if errors.As(op.Err, &sc) {
			return sc.Err
		}
		return op.Err
	}
	return err
}

// Guard ties conn's deadline to ctx for the duration of one exchange: the
// connection's deadline is ctx's deadline (if any), and cancelling ctx
// interrupts blocked reads and writes. Call the returned function when the
// exchange is over; it clears the deadline and reports ctx's error in place
// of the I/O error it caused.
func Guard(ctx context.Context, conn net.Conn) (done func(err error) error) {
	var mu sync.Mutex
	finished := false
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			conn.SetDeadline(time.Unix(1, 0))
		}
	})
	return func(err error) error {
		stop()
		mu.Lock()
		finished = true
		mu.Unlock()
		conn.SetDeadline(time.Time{})
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%w (%w)", cerr, err)
		}
		// The connection's deadline may fire just before ctx's timer.
		if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
			return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return err
	}
}

// ReadMsg reads exactly len(buf) bytes.
func ReadMsg(conn io.Reader, buf []byte) error {
	if _, err := io.ReadFull(conn, buf); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("peer closed the connection: %w", io.ErrUnexpectedEOF)
		}
		return err
	}
	return nil
}

// WriteMsg writes msg with a single Write call, so that the message leaves in
// one TCP segment when it fits: the stock tools read most messages with one
// read(2) call and fail on a short read.
func WriteMsg(conn io.Writer, msg []byte) error {
	n, err := conn.Write(msg)
	if err == nil && n != len(msg) {
		err = io.ErrShortWrite
	}
	return err
}
