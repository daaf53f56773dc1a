package perftest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/oob/oobtest"
)

func seqString(s []Step) string {
	var parts []string
	for _, st := range s {
		parts = append(parts, st.String())
	}
	return strings.Join(parts, " ")
}

// The sequences below restate perftest 4.5's main functions for two QPs and
// two runs; the one-QP, one-run forms are checked against the captures by
// TestReplayCaptures.
func TestSequence(t *testing.T) {
	const pre = "negotiate local "
	for _, tc := range []struct {
		tool Tool
		role Role
		all  bool
		want string
	}{
		{WriteBW, Client, false, pre + "keys(0) keys(1) connect keys(0) keys(1) sync prepare(0) run(0) prepare(1) run(1) sync reports sync done"},
		{WriteBW, Server, false, pre + "keys(0) keys(1) connect keys(0) keys(1) sync sync reports sync done"},
		{ReadBW, Client, true, pre + "keys(0) keys(1) connect keys(0) keys(1) sync prepare(0) run(0) prepare(1) run(1) sync reports sync done"},
		{AtomicBW, Server, false, pre + "keys(0) keys(1) connect keys(0) keys(1) sync sync reports sync done"},
		{SendBW, Client, false, pre + "keys(0) keys(1) connect sync keys(0) keys(1) prepare(0) sync run(0) prepare(1) sync run(1) sync done"},
		{SendBW, Server, true, pre + "keys(0) keys(1) connect sync keys(0) keys(1) prepare(0) sync run(0) sync prepare(1) sync run(1) sync sync done"},
		{WriteLat, Client, false, pre + "sync keys(0) keys(1) connect keys(0) keys(1) sync prepare(0) run(0) prepare(1) run(1)"},
		{WriteLat, Server, true, pre + "sync keys(0) keys(1) connect keys(0) keys(1) sync prepare(0) run(0) prepare(1) run(1)"},
		{ReadLat, Client, false, pre + "sync keys(0) keys(1) connect keys(0) keys(1) sync prepare(0) run(0) prepare(1) run(1) sync done"},
		{ReadLat, Server, false, pre + "sync keys(0) keys(1) connect keys(0) keys(1) sync sync done"},
		{SendLat, Client, true, pre + "keys(0) keys(1) connect sync keys(0) keys(1) prepare(0) sync run(0) prepare(1) sync run(1) sync done"},
		{SendLat, Server, false, pre + "keys(0) keys(1) connect sync keys(0) keys(1) prepare(0) sync run(0) prepare(1) sync run(1) sync done"},
	} {
		s, err := Sequence(Config{Tool: tc.tool, Role: tc.role, QPs: 2, Runs: 2, All: tc.all})
		if err != nil {
			t.Fatal(err)
		}
		if got := seqString(s); got != tc.want {
			t.Errorf("%s %s all=%v:\n got %s\nwant %s", tc.tool, tc.role, tc.all, got, tc.want)
		}
	}
	if _, err := Sequence(Config{Tool: Tool(99)}); err == nil {
		t.Error("Sequence of an unknown tool succeeded")
	}
	if _, err := Sequence(Config{Tool: WriteBW, Role: Role(7)}); err == nil {
		t.Error("Sequence of an unknown role succeeded")
	}
	if _, err := Sequence(Config{Tool: WriteBW, QPs: -1}); err == nil {
		t.Error("Sequence with negative QPs succeeded")
	}
}

// wireSteps lists the byte-carrying steps: both roles must agree on them.
func wireSteps(s []Step) string {
	var parts []string
	for _, st := range s {
		switch st.Kind {
		case StepNegotiate, StepKeys, StepSync, StepReports, StepDone:
			parts = append(parts, st.Kind.String())
		}
	}
	return strings.Join(parts, " ")
}

func TestSequenceRolesAgree(t *testing.T) {
	for tool := WriteBW; tool <= SendLat; tool++ {
		for _, qps := range []int{1, 3} {
			for _, runs := range []int{1, 4} {
				for _, all := range []bool{false, true} {
					for _, duplex := range []bool{false, true} {
						if duplex && !tool.BW() {
							continue
						}
						cfg := Config{Tool: tool, QPs: qps, Runs: runs, All: all, Duplex: duplex}
						c, _ := Sequence(cfg)
						cfg.Role = Server
						s, _ := Sequence(cfg)
						if wireSteps(c) != wireSteps(s) {
							t.Errorf("%s qps=%d runs=%d all=%v duplex=%v: client %s, server %s", tool, qps, runs, all, duplex, wireSteps(c), wireSteps(s))
						}
					}
				}
			}
		}
	}
}

// TestRunBothSides runs our client against our server for every tool.
func TestRunBothSides(t *testing.T) {
	for tool := WriteBW; tool <= SendLat; tool++ {
		for _, cfg := range []Config{{QPs: 1, Runs: 1}, {QPs: 3, Runs: 4, All: true}} {
			cfg.Tool = tool
			t.Run(fmt.Sprintf("%s/qps=%d/runs=%d", tool, cfg.QPs, cfg.Runs), func(t *testing.T) {
				runBothSides(t, cfg)
			})
		}
	}
}

type sideLog struct {
	mu     sync.Mutex
	events []string
}

func (l *sideLog) add(format string, a ...any) {
	l.mu.Lock()
	l.events = append(l.events, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

func keysFor(role Role, n int) []Dest {
	out := make([]Dest, n)
	for i := range out {
		out[i] = Dest{OutReads: 0x80, QPN: uint32(0x100*int(role+1) + i), PSN: uint32(0x1000 + i), RKey: uint32(0x200 + i),
			VAddr: 0x7f0000000000 + uint64(i)<<20, GID: netip.MustParseAddr(fmt.Sprintf("::ffff:198.51.100.%d", 1+int(role))).As16()}
	}
	return out
}

func runBothSides(t *testing.T, cfg Config) {
	cc, sc := oobtest.Pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clientReport := Report{Size: 4096, Iters: 5000, BWPeak: 11234.5, BWAvg: 11000.25, MsgRate: 2.75}
	type out struct {
		res Result
		log *sideLog
		err error
	}
	run := func(role Role, mtu MTU) out {
		c := cfg
		c.Role = role
		log := &sideLog{}
		hooks := Hooks{
			Local: func(a Agreed) ([]Dest, error) {
				log.add("local mtu=%d", a.MTU)
				return keysFor(role, c.QPs), nil
			},
			Connect: func(r []Dest) error {
				if len(r) != c.QPs {
					return fmt.Errorf("%d remote keys", len(r))
				}
				for i := range r {
					if r[i] != keysFor(1-role, c.QPs)[i] {
						return fmt.Errorf("remote key %d = %+v", i, r[i])
					}
				}
				log.add("connect")
				return nil
			},
			Prepare: func(r int) error { log.add("prepare %d", r); return nil },
			Run:     func(r int) error { log.add("run %d", r); return nil },
		}
		if role == Client {
			hooks.Report = func() Report { return clientReport }
		}
		conn := cc
		if role == Server {
			conn = sc
		}
		res, err := Run(ctx, conn, c, Params{MTU: mtu}, hooks)
		conn.Close()
		return out{res, log, err}
	}
	ch := make(chan out, 1)
	go func() { ch <- run(Server, MTU4096) }()
	cl := run(Client, MTU1024)
	sv := <-ch
	if cl.err != nil || sv.err != nil {
		t.Fatalf("client: %v; server: %v", cl.err, sv.err)
	}
	for _, o := range []out{cl, sv} {
		if o.res.Agreed.MTU != MTU1024 || o.res.Agreed.RemoteVersion != Version {
			t.Errorf("agreed %+v", o.res.Agreed)
		}
	}
	if cfg.Tool.BW() && cfg.Tool != SendBW {
		if !sv.res.HasReport || sv.res.RemoteReport != clientReport {
			t.Errorf("server got report %+v (%v), want %+v", sv.res.RemoteReport, sv.res.HasReport, clientReport)
		}
		if !cl.res.HasReport || cl.res.RemoteReport != (Report{}) {
			t.Errorf("client got report %+v (%v), want zeros", cl.res.RemoteReport, cl.res.HasReport)
		}
	} else if cl.res.HasReport || sv.res.HasReport {
		t.Errorf("%s exchanged reports", cfg.Tool)
	}
	// Both sides create QPs, connect, then run as the tool does.
	for _, o := range []struct {
		role Role
		log  *sideLog
	}{{Client, cl.log}, {Server, sv.log}} {
		want := []string{"local mtu=3", "connect"}
		runs := o.role == Client || cfg.Tool == SendBW || cfg.Tool == SendLat || cfg.Tool == WriteLat
		if runs {
			for r := range cfg.Runs {
				want = append(want, fmt.Sprintf("prepare %d", r), fmt.Sprintf("run %d", r))
			}
		}
		if got := strings.Join(o.log.events, ", "); got != strings.Join(want, ", ") {
			t.Errorf("%s hooks: %s; want %s", o.role, got, strings.Join(want, ", "))
		}
	}
}

func TestRunHookErrors(t *testing.T) {
	cc, sc := oobtest.Pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boom := errors.New("cannot create QP")
	go func() {
		Run(ctx, sc, Config{Tool: WriteBW, Role: Server}, Params{MTU: MTU1024}, Hooks{
			Local:   func(Agreed) ([]Dest, error) { return nil, boom },
			Connect: func([]Dest) error { return nil },
		})
		sc.Close()
	}()
	_, err := Run(ctx, cc, Config{Tool: WriteBW, Role: Client}, Params{MTU: MTU1024}, Hooks{
		Local:   func(Agreed) ([]Dest, error) { return keysFor(Client, 1), nil },
		Connect: func([]Dest) error { return nil },
	})
	if err == nil || !strings.Contains(err.Error(), "keys") {
		t.Fatalf("client error = %v, want a failed key exchange", err)
	}
	if _, err := Run(ctx, cc, Config{Tool: WriteBW}, Params{MTU: MTU1024}, Hooks{}); err == nil {
		t.Error("Run without hooks succeeded")
	}
	cc2, sc2 := oobtest.Pair(t)
	go func() {
		NewConn(sc2, Server).Negotiate(ctx, Params{MTU: MTU1024})
	}()
	_, err = Run(ctx, cc2, Config{Tool: WriteBW, QPs: 2}, Params{MTU: MTU1024}, Hooks{
		Local:   func(Agreed) ([]Dest, error) { return keysFor(Client, 1), nil },
		Connect: func([]Dest) error { return nil },
	})
	if err == nil || !strings.Contains(err.Error(), "1 keys for 2 QPs") {
		t.Fatalf("error = %v, want a key count mismatch", err)
	}
}

func TestAllSizes(t *testing.T) {
	s := AllSizes()
	if len(s) != 23 || s[0] != 2 || s[22] != 8<<20 {
		t.Fatalf("AllSizes = %v", s)
	}
}

// TestSequenceCM: -R puts a barrier, the rdma_cm connection and a
// barrier between the negotiation and the keys, and drops "done".
func TestSequenceCM(t *testing.T) {
	for _, tool := range []Tool{WriteBW, ReadBW, SendBW, WriteLat, ReadLat, SendLat} {
		plain, _ := Sequence(Config{Tool: tool, Role: Client})
		cm, err := Sequence(Config{Tool: tool, Role: Client, CM: true})
		if err != nil {
			t.Fatal(err)
		}
		want := append([]Step{plain[0], {Kind: StepSync}, {Kind: StepCMConnect}, {Kind: StepSync}}, plain[1:]...)
		if want[len(want)-1].Kind == StepDone {
			want = want[:len(want)-1]
		}
		if fmt.Sprint(cm) != fmt.Sprint(want) {
			t.Errorf("%v: %v\nwant %v", tool, cm, want)
		}
	}
}

// TestSequenceDuplex restates perftest 4.5's -b paths for two QPs and two
// runs: both sides run, each run of ib_write_bw (read, atomic) after a
// barrier (and with -a before one) and followed by the reports, with no
// closing reports; ib_send_bw's reports follow each run, except in
// duration mode.
func TestSequenceDuplex(t *testing.T) {
	const pre = "negotiate local keys(0) keys(1) connect "
	for _, tc := range []struct {
		tool     Tool
		all, dur bool
		want     string
	}{
		{WriteBW, false, false, pre + "keys(0) keys(1) sync prepare(0) sync run(0) reports prepare(1) sync run(1) reports sync done"},
		{ReadBW, true, false, pre + "keys(0) keys(1) sync prepare(0) sync run(0) sync reports prepare(1) sync run(1) sync reports sync done"},
		{AtomicBW, false, true, pre + "keys(0) keys(1) sync prepare(0) sync run(0) reports prepare(1) sync run(1) reports sync done"},
		{SendBW, false, false, pre + "sync keys(0) keys(1) prepare(0) sync run(0) reports prepare(1) sync run(1) reports sync done"},
		{SendBW, true, false, pre + "sync keys(0) keys(1) prepare(0) sync run(0) reports sync prepare(1) sync run(1) reports sync sync done"},
		{SendBW, false, true, pre + "sync keys(0) keys(1) prepare(0) sync run(0) prepare(1) sync run(1) sync done"},
	} {
		for _, role := range []Role{Client, Server} {
			s, err := Sequence(Config{Tool: tc.tool, Role: role, QPs: 2, Runs: 2, All: tc.all, Duplex: true, Duration: tc.dur})
			if err != nil {
				t.Fatal(err)
			}
			if got := seqString(s); got != tc.want {
				t.Errorf("%s %s all=%v duration=%v:\n got %s\nwant %s", tc.tool, role, tc.all, tc.dur, got, tc.want)
			}
			for _, st := range s {
				if st.Kind == StepReports && (st.Run < 0 || st.Run > 1) {
					t.Errorf("%s: reports of run %d", tc.tool, st.Run)
				}
			}
		}
	}
	for _, tool := range []Tool{WriteLat, ReadLat, SendLat, AtomicLat} {
		if _, err := Sequence(Config{Tool: tool, Duplex: true}); err == nil {
			t.Errorf("%s: bidirectional sequence made", tool)
		}
	}
}

// TestRunDuplex: with -b both sides run and each receives the peer's
// report of every run; an Agreed hook that changes the number of runs
// (ib_send_bw -a over UD) changes it on both sides.
func TestRunDuplex(t *testing.T) {
	for _, tool := range []Tool{WriteBW, SendBW} {
		t.Run(tool.String(), func(t *testing.T) {
			cc, sc := oobtest.Pair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			type out struct {
				runs    []int
				reports []Report
				err     error
			}
			run := func(role Role) out {
				var o out
				mine := func(r int) Report {
					return Report{Size: uint64(2 << r), Iters: uint64(100 + int(role)), BWAvg: float64(r)}
				}
				last := -1
				hooks := Hooks{
					Local:   func(Agreed) ([]Dest, error) { return keysFor(role, 1), nil },
					Connect: func([]Dest) error { return nil },
					Agreed:  func(Agreed) (int, error) { return 3, nil },
					Run:     func(r int) error { o.runs = append(o.runs, r); last = r; return nil },
					Report:  func() Report { return mine(last) },
					Reported: func(r int, rep Report) error {
						if want := (Report{Size: uint64(2 << r), Iters: uint64(100 + int(1-role)), BWAvg: float64(r)}); rep != want {
							return fmt.Errorf("run %d: peer's report %+v, want %+v", r, rep, want)
						}
						o.reports = append(o.reports, rep)
						return nil
					},
				}
				conn := cc
				if role == Server {
					conn = sc
				}
				_, o.err = Run(ctx, conn, Config{Tool: tool, Role: role, Runs: 23, All: true, Duplex: true}, Params{MTU: MTU1024}, hooks)
				conn.Close()
				return o
			}
			ch := make(chan out, 1)
			go func() { ch <- run(Server) }()
			cl := run(Client)
			sv := <-ch
			for _, o := range []out{cl, sv} {
				if o.err != nil {
					t.Fatal(o.err)
				}
				if fmt.Sprint(o.runs) != "[0 1 2]" || len(o.reports) != 3 {
					t.Errorf("runs %v, %d reports; want 3 of each", o.runs, len(o.reports))
				}
			}
		})
	}
}
