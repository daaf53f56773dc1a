package app

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		rest []string
		n    int
		v    bool
	}{
		{[]string{"-n", "3", "host"}, []string{"host"}, 3, false},
		{[]string{"host", "-n", "3", "--verify"}, []string{"host"}, 3, true},
		{[]string{"a", "--size", "4", "b"}, []string{"a", "b"}, 4, false},
		{[]string{"--", "-n", "x"}, []string{"-n", "x"}, 0, false},
		{[]string{"a", "--", "-n"}, []string{"a", "-n"}, 0, false},
		{nil, nil, 0, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var n int
		var v bool
		f := Aliases{FlagSet: fs}
		f.Int(&n, "n", "size")
		f.Bool(&v, "verify")
		rest, err := ParseArgs(fs, c.args)
		if err != nil || !slices.Equal(rest, c.rest) || n != c.n || v != c.v {
			t.Errorf("%q: rest %q, n %d, verify %v, %v; want %q, %d, %v", c.args, rest, n, v, err, c.rest, c.n, c.v)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := ParseArgs(fs, []string{"host", "--nope"}); err == nil {
		t.Error("an unknown flag after an argument was accepted")
	}
}

func TestAliasesKeepDefaults(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n, s := 7, "x"
	f := Aliases{FlagSet: fs}
	f.Int(&n, "n", "iters")
	f.String(&s, "A", "atomic_type")
	if err := fs.Parse([]string{"--iters", "9"}); err != nil || n != 9 || s != "x" {
		t.Errorf("n %d, s %q, %v", n, s, err)
	}
	if d := fs.Lookup("n").DefValue; d != "7" {
		t.Errorf("default of -n %q, want 7", d)
	}
}

// TestConnectorClient dials a loopback listener that starts late: the
// client retries the refused connection.
func TestConnectorClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	connect := Connector("127.0.0.1", port, 5*time.Second)
	if _, err := Connector("127.0.0.1", port, 50*time.Millisecond)(context.Background()); !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no server: %v", err)
	}
	accepted := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			accepted <- err
			return
		}
		defer ln.Close()
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}
