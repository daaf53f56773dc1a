package cmatose

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/apptest"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

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

func pair(t *testing.T, faults *fault.Config) (a, b *stack.Device) {
	p := apptest.NewPair(t, 1500, faults)
	a, _ = verbs.StackDevice(p.A)
	b, _ = verbs.StackDevice(p.B)
	// Agents with quick retries (16.8 ms) for the lossy runs; the tools
	// find them with AgentFor.
	for _, d := range []*stack.Device{a, b} {
		if _, err := rdmacm.NewAgent(d, rdmacm.Config{ResponseTimeout: 12, TimeWait: 20 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// both runs a server on b and a client on a; it returns their outputs.
func both(t *testing.T, ud bool, a, b *stack.Device, cfg Config) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := Run
	if ud {
		run = RunUD
	}
	var so, co syncBuf
	scfg, ccfg := cfg, cfg
	scfg.Server, scfg.Stdout = true, &so
	ccfg.Addr, ccfg.Stdout = apptest.IPB, &co
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, b, scfg) }()
	var err error
	for i := 0; i < 100; i++ { // until the server listens
		if err = run(ctx, a, ccfg); err == nil || !strings.Contains(err.Error(), "REJECTED, error: 8") &&
			!strings.Contains(err.Error(), "UNREACHABLE, error: 1") {
			break
		}
		co = syncBuf{}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		cancel()
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", err, co.String(), <-errc, so.String())
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v\n%s", err, so.String())
	}
	return so.String(), co.String()
}

func TestCmatose(t *testing.T) {
	a, b := pair(t, nil)
	so, co := both(t, false, a, b, Config{Connections: 3, Count: 10, Size: 100})
	want := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\n"
	if so != want {
		t.Errorf("server said\n%s\nwant\n%s", so, want)
	}
	want = "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\n"
	if co != want {
		t.Errorf("client said\n%s\nwant\n%s", co, want)
	}
	if a.NumQPs() != 1 || b.NumQPs() != 1 { // QP1 stays
		t.Errorf("QPs left: %d and %d", a.NumQPs()-1, b.NumQPs()-1)
	}
}

// TestCmatoseLoss: 20 % of the frames lost both ways, the CM MADs among
// them; every connection still comes up once and every message arrives.
func TestCmatoseLoss(t *testing.T) {
	a, b := pair(t, &fault.Config{Seed: 7, Drop: 0.2})
	both(t, false, a, b, Config{Connections: 2, Count: 20, Size: 1000})
}

func TestUdaddy(t *testing.T) {
	a, b := pair(t, nil)
	so, co := both(t, true, a, b, Config{Connections: 2, Count: 10, Size: 100})
	want := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\n"
	if so != want {
		t.Errorf("server said\n%s\nwant\n%s", so, want)
	}
	want = "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\n"
	if co != want {
		t.Errorf("client said\n%s\nwant\n%s", co, want)
	}
}

// TestNobodyListens: the stock tools' error lines.
func TestNobodyListens(t *testing.T) {
	a, _ := pair(t, nil)
	ctx := context.Background()
	err := Run(ctx, a, Config{Addr: apptest.IPB, Port: 9})
	var ee *EventError
	if !errors.As(err, &ee) || ee.Error() != "event: RDMA_CM_EVENT_REJECTED, error: 8" {
		t.Fatalf("cmatose: %v", err)
	}
	err = RunUD(ctx, a, Config{Addr: apptest.IPB, Port: 9})
	if !errors.As(err, &ee) || ee.Error() != "event: RDMA_CM_EVENT_UNREACHABLE, error: 1" {
		t.Fatalf("udaddy: %v", err)
	}
}
