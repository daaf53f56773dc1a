// Package leakcheck fails a test binary whose tests leave goroutines
// running: a package whose code starts goroutines (engines, sessions,
// servers) checks that closing what it opened ends them.
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
package leakcheck

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// Wait is how long Run waits for goroutines to end after the tests.
const Wait = 5 * time.Second

// Run runs the tests of m. When they pass, it waits up to Wait for the
// goroutines started since it was called to end, and fails the run (it
// returns 1) listing the stacks of those still running. Goroutines of
// the testing framework and of os/signal are not counted. A fuzzing run
// is not checked.
func Run(m *testing.M) int {
	before := ids(stacks())
	code := m.Run()
	if code != 0 || fuzzing() {
		return code
	}
	left := leftAfter(before, Wait)
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "leakcheck: %d goroutines left after the tests:\n\n%s\n", len(left), bytes.Join(left, []byte("\n\n")))
		return 1
	}
	return code
}

// leftAfter waits up to wait for the goroutines not in before (a set of
// goroutine IDs) and not ignored to end, and returns the stacks of those
// still running.
func leftAfter(before map[uint64]bool, wait time.Duration) [][]byte {
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		var left [][]byte
		for _, g := range stacks()[1:] { // not the caller's
			if id, ok := id(g); ok && !before[id] && !ignored(g) {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(pause)
	}
}

// stacks returns the stack of every goroutine, the caller's first.
func stacks() [][]byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Split(buf[:n], []byte("\n\n"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

func ids(gs [][]byte) map[uint64]bool {
	m := make(map[uint64]bool, len(gs))
	for _, g := range gs {
		if id, ok := id(g); ok {
			m[id] = true
		}
	}
	return m
}

// id parses the ID of a goroutine's stack: "goroutine 12 [running]:".
func id(g []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(g, []byte("goroutine "))
	if !ok {
		return 0, false
	}
	num, _, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(string(num), 10, 64)
	return n, err == nil
}

// ignore lists functions whose goroutines are not the tests' own: the
// testing framework's, and os/signal's watcher, which lives as long as
// the process once a test asked for a signal.
var ignore = [][]byte{
	[]byte("\ntesting.(*M)."),
	[]byte("\ntesting.tRunner("),
	[]byte("\ntesting.runTests("),
	[]byte("\nos/signal.signal_recv("),
	[]byte("\nos/signal.loop("),
	[]byte("\nruntime.ensureSigM."),
}

func ignored(g []byte) bool {
	for _, f := range ignore {
		if bytes.Contains(g, f) {
			return true
		}
	}
	return false
}

func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}
