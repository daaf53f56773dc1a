// Package oobtest helps test the out-of-band exchanges against the
// reference captures of the stock tools: it finds the captures, extracts
// their TCP streams, replays one side of a stream against an implementation
// over loopback TCP, and records how the implementation wrote and read.
package oobtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// CaptureDir returns the directory of the rdma_rxe reference captures,
// ../shared/pcaps/rxe-6.1 relative to the repository root, or skips the test
// when it is absent.
func CaptureDir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Skip("repository root (go.mod) not found")
		}
		root = parent
	}
	dir := filepath.Join(root, "..", "shared", "pcaps", "rxe-6.1")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("reference captures not available: %v", err)
	}
	return dir
}

// CaptureStream returns the one TCP stream on port 18515 of the named
// capture (without ".pcap"), skipping when captures are absent.
func CaptureStream(t testing.TB, name string) *Stream {
	t.Helper()
	dir := CaptureDir(t)
	ss, err := ReadTCPStreams(filepath.Join(dir, name+".pcap"), 18515)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 {
		t.Fatalf("%s: %d TCP streams with data on port 18515, want 1", name, len(ss))
	}
	return ss[0]
}

// Pair returns the two ends of a loopback TCP connection.
func Pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		client.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return client, r.c
}

// Check compares the bytes the implementation sent (got) with the captured
// ones (want) for script entry i, returning a description of any difference.
type Check func(i int, got, want []byte) error

// Exact is a Check that requires equal bytes.
func Exact(i int, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	return fmt.Errorf("entry %d differs:\n%s", i, Diff(got, want, nil))
}

// Replay plays the peer side of script against conn: a chunk written by peer
// is written to conn, a chunk of the other side is read from conn (exactly
// its length) and given to check. After the script it requires end of
// stream: the implementation must close its end and send nothing more.
func Replay(conn net.Conn, script []Chunk, peer Dir, check Check) error {
	for i, c := range script {
		if c.Dir == peer {
			if _, err := conn.Write(c.Data); err != nil {
				return fmt.Errorf("entry %d: write: %w", i, err)
			}
			continue
		}
		got := make([]byte, len(c.Data))
		n, err := io.ReadFull(conn, got)
		if err != nil {
			return fmt.Errorf("entry %d: read %d of %d bytes (%q): %w", i, n, len(got), got[:n], err)
		}
		if err := check(i, got, c.Data); err != nil {
			return err
		}
	}
	var extra [256]byte
	n, err := conn.Read(extra[:])
	if n > 0 {
		return fmt.Errorf("after the script: %d unexpected bytes %q", n, extra[:n])
	}
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the script: want end of stream, got %w", err)
	}
	return nil
}

// Start runs Replay in a goroutine and returns its result channel. When the
// replay ends, conn is closed, so that the implementation on the other end
// fails at once instead of waiting for a script that went astray.
func Start(conn net.Conn, script []Chunk, peer Dir, check Check) <-chan error {
	ch := make(chan error, 1)
	go func() {
		err := Replay(conn, script, peer, check)
		conn.Close()
		ch <- err
	}()
	return ch
}

// Diff renders got and want side by side in rows of 16 bytes, marking the
// rows that differ; mask (if not nil, same length as want) marks bytes that
// may differ with true.
func Diff(got, want []byte, mask []bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  got  %d bytes: %q\n  want %d bytes: %q\n", len(got), got, len(want), want)
	n := max(len(got), len(want))
	for off := 0; off < n; off += 16 {
		end := min(off+16, n)
		row := func(p []byte) string {
			var s strings.Builder
			for i := off; i < end; i++ {
				if i < len(p) {
					fmt.Fprintf(&s, "%02x ", p[i])
				} else {
					s.WriteString("-- ")
				}
			}
			return s.String()
		}
		var marks strings.Builder
		differs := false
		for i := off; i < end; i++ {
			switch {
			case mask != nil && i < len(mask) && mask[i]:
				marks.WriteString("~~ ")
			case i >= len(got) || i >= len(want) || got[i] != want[i]:
				marks.WriteString("^^ ")
				differs = true
			default:
				marks.WriteString("   ")
			}
		}
		if differs {
			fmt.Fprintf(&b, "  %04x got  %s\n       want %s\n            %s\n", off, row(got), row(want), marks.String())
		}
	}
	return b.String()
}

// Op is one Read or Write call seen by a Recorder.
type Op struct {
	Write bool
	// Data is what was written, or what a read returned.
	Data []byte
	// ReadBefore and WrittenBefore count the bytes read and written on the
	// connection before this call.
	ReadBefore, WrittenBefore int
}

// Recorder wraps a net.Conn and records its Write calls and the bytes read
// before each, to check message boundaries and causality.
type Recorder struct {
	net.Conn
	mu            sync.Mutex
	read, written int
	ops           []Op
}

// Read implements net.Conn.
func (r *Recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	if n > 0 {
		r.ops = append(r.ops, Op{Data: append([]byte(nil), p[:n]...), ReadBefore: r.read, WrittenBefore: r.written})
	}
	r.read += n
	r.mu.Unlock()
	return n, err
}

// Write implements net.Conn.
func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.ops = append(r.ops, Op{Write: true, Data: append([]byte(nil), p...), ReadBefore: r.read, WrittenBefore: r.written})
	r.mu.Unlock()
	n, err := r.Conn.Write(p)
	r.mu.Lock()
	r.written += n
	r.mu.Unlock()
	return n, err
}

// Counts returns the bytes read and written so far.
func (r *Recorder) Counts() (read, written int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read, r.written
}

// Writes returns the recorded Write calls.
func (r *Recorder) Writes() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w []Op
	for _, o := range r.ops {
		if o.Write {
			w = append(w, o)
		}
	}
	return w
}

// CheckCausality checks, for the side ours of script, that each of its
// chunks was written only after the implementation had read every byte the
// peer sent before that chunk in the capture: an implementation that speaks
// early passes a byte comparison over TCP but would break the stock tool.
// independent (may be nil) exempts pairs of entries that the two sides send
// without waiting for each other, where the capture's order is chance.
func CheckCausality(script []Chunk, ours Dir, writes []Op, independent func(peer, our int) bool) error {
	oursOff := 0
	for i, c := range script {
		if c.Dir != ours {
			continue
		}
		peerBefore := 0
		for j := range i {
			if script[j].Dir != ours && (independent == nil || !independent(j, i)) {
				peerBefore += len(script[j].Data)
			}
		}
		// The write that carries the first byte of this chunk.
		for _, w := range writes {
			if w.WrittenBefore <= oursOff && oursOff < w.WrittenBefore+len(w.Data) {
				if w.ReadBefore < peerBefore {
					return fmt.Errorf("entry %d (%q) was written after reading %d bytes, before the %d the peer sends first",
						i, c.Data, w.ReadBefore, peerBefore)
				}
				break
			}
		}
		oursOff += len(c.Data)
	}
	return nil
}

// CheckWriteBoundaries requires that the implementation wrote each of its
// captured chunks with exactly one Write call, as the stock tools send each
// message with one write(2) and read it with one read(2).
func CheckWriteBoundaries(chunks []Chunk, ours Dir, writes []Op) error {
	var want [][]byte
	for _, c := range chunks {
		if c.Dir == ours {
			want = append(want, c.Data)
		}
	}
	if len(want) != len(writes) {
		return fmt.Errorf("%d Write calls, want %d (one per captured segment)", len(writes), len(want))
	}
	for i := range want {
		if len(want[i]) != len(writes[i].Data) {
			return fmt.Errorf("Write %d has %d bytes, the captured segment %d", i, len(writes[i].Data), len(want[i]))
		}
	}
	return nil
}

// Masked returns a Check that ignores the bytes mask marks in each entry:
// the fields that legitimately differ from run to run.
func Masked(mask func(i int, want []byte) []bool) Check {
	return func(i int, got, want []byte) error {
		m := mask(i, want)
		if len(got) == len(want) {
			same := true
			for j := range want {
				if got[j] != want[j] && (m == nil || !m[j]) {
					same = false
					break
				}
			}
			if same {
				return nil
			}
		}
		return fmt.Errorf("entry %d differs outside the masked fields (~~ masked, ^^ differs):\n%s", i, Diff(got, want, m))
	}
}
