package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"net"

	"github.com/uroce/uroce/internal/oob"
)

// appendMessages appends count address messages: local, then zero
// addresses.
func appendMessages(b []byte, local []Dest, count int) []byte {
	for i := range count {
		var d Dest
		if i < len(local) {
			d = local[i]
		}
		b = d.AppendWire(b)
	}
	return b
}

func readMessages(conn net.Conn, count int) ([]Dest, error) {
	buf := make([]byte, count*MessageSize)
	if err := oob.ReadMsg(conn, buf); err != nil {
		return nil, err
	}
	out := make([]Dest, count)
	for i := range out {
		d, err := ParseDest(buf[i*MessageSize : (i+1)*MessageSize])
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

func checkCount(local []Dest, count int) error {
	if count < 1 {
		return fmt.Errorf("message count %d: must be at least 1", count)
	}
	if len(local) == 0 || len(local) > count {
		return fmt.Errorf("%d local addresses for %d messages", len(local), count)
	}
	return nil
}

// Client runs the client side of the exchange on conn: it sends count
// address messages (local, padded with zero addresses up to count; count is
// 1 for the rc, uc and ud tools and SRQMessages for srq), reads the server's
// count messages, and sends "done". It returns the server's addresses; the
// caller then moves its QPs to RTR/RTS with them, as the stock client does
// after the exchange. conn is left open.
func Client(ctx context.Context, conn net.Conn, local []Dest, count int) (remote []Dest, err error) {
	if err := checkCount(local, count); err != nil {
		return nil, fmt.Errorf("pingpong client: %w", err)
	}
	done := oob.Guard(ctx, conn)
	defer func() { err = done(err) }()
	if err := oob.WriteMsg(conn, appendMessages(nil, local, count)); err != nil {
		return nil, fmt.Errorf("pingpong client: send local address: %w", err)
	}
	remote, err = readMessages(conn, count)
	if err != nil {
		return nil, fmt.Errorf("pingpong client: read remote address: %w", err)
	}
	if err := oob.WriteMsg(conn, DoneMsg); err != nil {
		return nil, fmt.Errorf("pingpong client: send done: %w", err)
	}
	return remote, nil
}

// Server runs the server side of the exchange on conn: it reads the
// client's count address messages and calls connect with all of them (zero
// padding included), where the caller moves its QPs to RTR/RTS, as the stock
// server does before it replies; then it sends its own count messages (local
// padded with zero addresses) and waits for the client's "done". If connect
// fails, Server returns its error without replying, as the stock server
// closes the connection then. conn is left open.
func Server(ctx context.Context, conn net.Conn, local []Dest, count int, connect func(remote []Dest) error) (remote []Dest, err error) {
	if err := checkCount(local, count); err != nil {
		return nil, fmt.Errorf("pingpong server: %w", err)
	}
	done := oob.Guard(ctx, conn)
	defer func() { err = done(err) }()
	remote, err = readMessages(conn, count)
	if err != nil {
		return nil, fmt.Errorf("pingpong server: read remote address: %w", err)
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return nil, fmt.Errorf("pingpong server: connect: %w", err)
		}
	}
	if err := oob.WriteMsg(conn, appendMessages(nil, local, count)); err != nil {
		return nil, fmt.Errorf("pingpong server: send local address: %w", err)
	}
	var msg [len("done\x00")]byte
	if err := oob.ReadMsg(conn, msg[:]); err != nil {
		return nil, fmt.Errorf("pingpong server: read done: %w", err)
	}
	if !bytes.Equal(msg[:], DoneMsg) {
		return nil, fmt.Errorf("pingpong server: read done: got %q", msg[:])
	}
	return remote, nil
}
