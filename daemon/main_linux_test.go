package daemon_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestMain fails the package when a session's or a server's goroutine
// outlives the tests: every server is shut down and every client closed
// by then.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leftGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leftGoroutines() string {
	var buf []byte
	for i := 0; i < 100; i++ {
		buf = make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left [][]byte
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if bytes.Contains(g, []byte("uroce/daemon.(*session)")) || bytes.Contains(g, []byte("uroce/daemon.(*Server)")) ||
				bytes.Contains(g, []byte("uroce/stack.(*engine).run")) {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return ""
		}
		if i == 99 {
			return string(bytes.Join(left, []byte("\n\n")))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ""
}
