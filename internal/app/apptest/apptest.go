// Package apptest joins two uroce devices for the tests of the tool
// libraries: an in-memory pipe (optionally with faults) between them and a
// loopback TCP listener for the out-of-band exchange.
package apptest

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/oob"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// Addresses of the two devices.
var (
	MACA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	MACB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	IPA  = netip.MustParseAddr("192.0.2.10")
	IPB  = netip.MustParseAddr("192.0.2.11")
)

// Pair is two devices joined by a pipe: in-process stacks, through their
// verbs (verbs.StackDevice gives the stack devices back).
type Pair struct {
	A, B   verbs.Device
	FA, FB *fault.Link // nil without faults
}

// NewPair opens two devices with IP MTU mtu joined by a pipe; faults, when
// not nil, harm what each side transmits (seeded differently per side).
// The devices are closed when the test ends.
func NewPair(t testing.TB, mtu int, faults *fault.Config) *Pair {
	t.Helper()
	pa, pb := pipe.New(pipe.Config{MTU: mtu, Slots: 1024})
	var la, lb stack.Link = pa, pb
	p := &Pair{}
	if faults != nil {
		fa, fb := *faults, *faults
		fb.Seed ^= 0x5bd1e995
		p.FA, p.FB = fault.Wrap(pa, fa), fault.Wrap(pb, fb)
		la, lb = p.FA, p.FB
	}
	nb := stack.StaticNeighbors{IPA: MACA, IPB: MACB}
	a, err := stack.Open(context.Background(), stack.Config{Link: la, MAC: MACA, Addrs: []netip.Addr{IPA}, Neighbors: nb, Name: "uroceA"})
	if err != nil {
		t.Fatal(err)
	}
	p.A = verbs.Local(a)
	t.Cleanup(func() { p.A.Close() })
	b, err := stack.Open(context.Background(), stack.Config{Link: lb, MAC: MACB, Addrs: []netip.Addr{IPB}, Neighbors: nb, Name: "uroceB"})
	if err != nil {
		t.Fatal(err)
	}
	p.B = verbs.Local(b)
	t.Cleanup(func() { p.B.Close() })
	return p
}

// Exchange is a loopback TCP listener for one out-of-band exchange: Accept
// is the server's connect function, Dial the client's.
type Exchange struct {
	ln net.Listener
}

// NewExchange listens on an ephemeral loopback port, closed when the test
// ends.
func NewExchange(t testing.TB) *Exchange {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &Exchange{ln: ln}
}

// Accept accepts one connection.
func (e *Exchange) Accept(ctx context.Context) (net.Conn, error) {
	return oob.Accept(ctx, e.ln)
}

// Dial connects to the listener.
func (e *Exchange) Dial(ctx context.Context) (net.Conn, error) {
	return oob.Dial(ctx, e.ln.Addr().String(), 10*time.Millisecond)
}

// RunBoth runs server and client at once under a context that ends after
// timeout, and returns when both have. A client that fails cancels the
// context, so that a server still waiting for it gives up.
func RunBoth(timeout time.Duration, server func(ctx context.Context), client func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		server(ctx)
	}()
	if err := client(ctx); err != nil {
		cancel()
	}
	<-done
}
