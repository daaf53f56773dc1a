package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/apptest"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// syncBuf is a bytes.Buffer safe for the concurrent writes of a test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func stackPair(t *testing.T) (a, b *stack.Device) {
	p := apptest.NewPair(t, 1500, nil)
	a, _ = verbs.StackDevice(p.A)
	b, _ = verbs.StackDevice(p.B)
	return a, b
}

// expected returns the ping data lines of count pings of size bytes.
func expected(prefix string, count, size int) string {
	var b strings.Builder
	buf := make([]byte, size)
	start := byte(65)
	for i := 0; i < count; i++ {
		Fill(buf, i, start)
		if start++; start > 122 {
			start = 65
		}
		fmt.Fprintf(&b, "%sping data: %s\n", prefix, cString(buf))
	}
	return b.String()
}

func TestFill(t *testing.T) {
	b := make([]byte, 64)
	Fill(b, 0, 65)
	want := "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	if string(cString(b)) != want || b[63] != 0 {
		t.Fatalf("ping 0: %q", b)
	}
	// The letters wrap from 'z' back to 'A'.
	Fill(b, 12, 120)
	if got := string(cString(b)); got != "rdma-ping-12: xyzABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmn" {
		t.Fatalf("ping 12: %q", got)
	}
}

// TestPingPong runs the server on one device and the client on the
// other, joined by the in-memory pipe, with -C 10 -V -v.
func TestPingPong(t *testing.T) {
	for _, size := range []int{MinSize, 64, 1000, 4097, MaxSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, b := stackPair(t)
			// The server's CM answers from the start: a REQ before it
			// would wait for its resend (4.3 s).
			if _, err := rdmacm.AgentFor(b); err != nil {
				t.Fatal(err)
			}
			var sOut, cOut syncBuf
			srv := Config{Server: true, Size: size, Verbose: true, Validate: true, Stdout: &sOut, Stderr: &sOut}
			cli := Config{Addr: apptest.IPB, Size: size, Count: 10, Verbose: true, Validate: true,
				ConnectWait: 5 * time.Second, Stdout: &cOut, Stderr: &cOut}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			serr := make(chan error, 1)
			go func() { serr <- Run(ctx, b, srv) }()
			if err := Run(ctx, a, cli); err != nil {
				t.Fatalf("client: %v\n%s", err, cOut.String())
			}
			if err := <-serr; err != nil {
				t.Fatalf("server: %v\n%s", err, sOut.String())
			}
			want := expected("", 10, size) + "client DISCONNECT EVENT...\n"
			if got := cOut.String(); got != want {
				t.Errorf("client output:\n%s\nwant:\n%s", got, want)
			}
			want = expected("server ", 10, size) + "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"
			if got := sOut.String(); got != want {
				t.Errorf("server output:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestNoListener: a client to a port nobody listens on fails at once,
// naming the rejection.
func TestNoListener(t *testing.T) {
	a, b := stackPair(t)
	if _, err := rdmacm.AgentFor(b); err != nil { // the peer's CM answers
		t.Fatal(err)
	}
	var out syncBuf
	t0 := time.Now()
	err := Run(context.Background(), a, Config{Addr: apptest.IPB, Port: 7999, Count: 1, Stdout: &out, Stderr: &out})
	var ce *ConnectError
	var rej *rdmacm.RejectError
	if !errors.As(err, &ce) || ce.Event != "RDMA_CM_EVENT_REJECTED" || ce.Status != 8 ||
		!errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID ||
		!strings.Contains(err.Error(), "nobody listens on 192.0.2.11:7999") {
		t.Fatalf("run: %v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("took %v to fail", d)
	}
}

func TestBadSize(t *testing.T) {
	a, _ := stackPair(t)
	for _, n := range []int{MinSize - 1, MaxSize + 1} {
		if err := Run(context.Background(), a, Config{Addr: apptest.IPB, Size: n}); err == nil ||
			!strings.Contains(err.Error(), "invalid size") {
			t.Errorf("size %d: %v", n, err)
		}
	}
}
