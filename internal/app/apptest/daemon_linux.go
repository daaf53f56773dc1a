package apptest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/verbs"
)

// NewDaemonPair is NewPair with each device served by a uroce daemon: A
// and B are clients of the daemons, as a tool run with --daemon has.
func NewDaemonPair(t testing.TB, mtu int, faults *fault.Config) *Pair {
	t.Helper()
	p := NewPair(t, mtu, faults)
	dir, err := os.MkdirTemp("", "uroce-apptest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i, d := range []*verbs.Device{&p.A, &p.B} {
		sd, _ := verbs.StackDevice(*d)
		s, err := daemon.Listen(daemon.Config{Device: sd, Socket: filepath.Join(dir, string(rune('a'+i))+".sock"), Netdev: "pipe"})
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve()
		c, err := client.Open(context.Background(), s.Socket())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Shutdown(); sd.Close() })
		*d = c
	}
	return p
}
