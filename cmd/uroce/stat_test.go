package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// statDaemons starts two stack devices joined by the in-memory pipe, each
// served by a daemon on a socket in a temporary directory, and returns
// the sockets.
func statDaemons(t *testing.T) (sockA, sockB string) {
	t.Helper()
	macA, macB := [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	la, lb := pipe.New(pipe.Config{MTU: 9000})
	nb := stack.StaticNeighbors{ipA: macA, ipB: macB}
	dir := t.TempDir()
	serve := func(link stack.Link, mac [6]byte, ip netip.Addr, sock string) {
		d, err := stack.Open(context.Background(), stack.Config{Link: link, MAC: mac, Addrs: []netip.Addr{ip}, Neighbors: nb})
		if err != nil {
			t.Fatal(err)
		}
		s, err := daemon.Listen(daemon.Config{Device: d, Socket: sock, Netdev: "pipe"})
		if err != nil {
			d.Close()
			t.Fatal(err)
		}
		go s.Serve()
		t.Cleanup(func() {
			s.Shutdown()
			d.Close()
		})
	}
	sockA, sockB = filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	serve(la, macA, ipA, sockA)
	serve(lb, macB, ipB, sockB)
	return sockA, sockB
}

// statEnd is one client's objects: a PD, a CQ, a registered buffer and
// an RC QP.
type statEnd struct {
	dev *client.Device
	cq  verbs.CQ
	mr  verbs.MR
	qp  verbs.QP
}

func newStatEnd(t *testing.T, sock string) *statEnd {
	t.Helper()
	dev, err := client.Open(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	e := &statEnd{dev: dev}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	buf, err := dev.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	if e.mr, err = pd.RegisterMR(buf, stack.AccessLocalWrite|stack.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 16, MaxRecvWR: 16,
		MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		t.Fatal(err)
	}
	return e
}

// statConnect takes both QPs to RTS, each addressed to the other.
func statConnect(t *testing.T, a, b *statEnd) {
	t.Helper()
	for _, x := range [][2]*statEnd{{a, b}, {b, a}} {
		q, peer := x[0].qp, x[1]
		gid, err := peer.dev.GID(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTR(stack.RTRAttr{DestQPN: peer.qp.QPN(), AH: stack.AHAttr{DGID: gid, SGIDIndex: 1},
			RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTS(stack.RTSAttr{SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// statWait waits for one completion on cq and checks it succeeded.
func statWait(t *testing.T, cq verbs.CQ) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wc := make([]stack.WC, 1)
	for cq.Poll(wc) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if wc[0].Status != 0 {
		t.Fatalf("completion %+v", wc[0])
	}
}

func TestStat(t *testing.T) {
	sockA, sockB := statDaemons(t)
	a, b := newStatEnd(t, sockA), newStatEnd(t, sockB)
	statConnect(t, a, b)
	if err := b.qp.PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{b.mr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []stack.SGE{a.mr.SGE(0, 3000)}}); err != nil {
		t.Fatal(err)
	}
	statWait(t, a.cq)
	statWait(t, b.cq)
	want, err := a.dev.Stat(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.QPs) != 1 || len(want.Sessions) != 1 {
		t.Fatalf("Stat: %+v", want)
	}
	q, se := want.QPs[0], want.Sessions[0]
	qpLine := fmt.Sprintf("qpn %d type RC state RTS sq-psn %d rq-psn %d dest-qpn %d pid %d comm %s\n",
		a.qp.QPN(), q.SQPSN, q.RQPSN, b.qp.QPN(), se.PID, se.Comm)
	if q.SQPSN == 100 {
		t.Errorf("sq-psn did not move: %+v", q)
	}

	code, out, errOut := runArgs("stat", "--socket", sockA)
	lines := strings.Split(out, "\n")
	if code != 0 || !strings.HasPrefix(lines[0], "device uroce0 netdev pipe uptime ") || !strings.Contains(out, qpLine) ||
		!strings.Contains(out, "\nsent_pkts ") || !strings.Contains(out, "\nrcv_icrc_err 0\n") ||
		!strings.Contains(out, fmt.Sprintf("\nsession %d pid %d uid %d comm %s ", se.ID, se.PID, se.UID, se.Comm)) ||
		!strings.Contains(out, " mr 1 ") || !strings.Contains(out, " qp 1 ") || !strings.Contains(out, " mr-bytes 65536\n") {
		t.Errorf("stat: exit %d, want %q\n%s%s", code, qpLine, out, errOut)
	}
	if strings.Contains(out, "    sent_pkts") {
		t.Errorf("stat without --qp prints QP counters:\n%s", out)
	}
	var names []string
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) == 2 {
			names = append(names, f[0])
		}
	}
	if n := len(want.Device.Counters) + len(want.Device.CM); len(names) != n || !sortedStrings(names) || len(want.Device.CM) == 0 {
		t.Errorf("counter lines %v, want the %d counters (the CM's among them) sorted", names, n)
	}

	code, out, errOut = runArgs("stat", "--json", "--socket", sockA)
	var got proto.Stat
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Device.Name != "uroce0" || len(got.QPs) != 1 ||
		got.QPs[0].QPN != a.qp.QPN() || got.QPs[0].State != "RTS" || got.Device.Counters["sent_pkts"] == 0 ||
		withQP(got.Sessions) != 1 {
		t.Errorf("stat --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}

	code, out, errOut = runArgs("stat", "--socket", sockA, "--qp", fmt.Sprint(a.qp.QPN()))
	if code != 0 || !strings.Contains(out, qpLine+"    ") || !strings.Contains(out, "\n    sent_pkts ") ||
		strings.Contains(out, "    sent_pkts 0\n") {
		t.Errorf("stat --qp %d: exit %d\n%s%s", a.qp.QPN(), code, out, errOut)
	}
	code, out, errOut = runArgs("stat", "--socket", sockA, "--qp", "0xfffff0")
	if code != 0 || strings.Contains(out, "\nqpn ") || !strings.Contains(out, "\nsession ") {
		t.Errorf("stat --qp of no QP: exit %d\n%s%s", code, out, errOut)
	}

	// The other daemon has the other client and QP.
	code, out, _ = runArgs("stat", "--socket", sockB)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("qpn %d type RC state RTS ", b.qp.QPN())) ||
		!strings.Contains(out, fmt.Sprintf("dest-qpn %d ", a.qp.QPN())) {
		t.Errorf("stat of daemon b: exit %d\n%s", code, out)
	}
}

func sortedStrings(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

func TestStatErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.sock")
	for _, c := range []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"--socket", missing}, 1, "open " + missing + ": no uroce daemon: is the daemon running?"},
		{[]string{"--json", "--socket", missing}, 1, missing},
		{[]string{"-d", "uroce-stat-test-none"}, 1, "/run/uroce/uroce-stat-test-none.sock"},
		{[]string{"--bogus"}, 2, "usage: uroce stat"},
		{[]string{"--qp", "-1"}, 2, "usage: uroce stat"},
		{[]string{"--qp", "0x1000000"}, 2, "24 bits"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		code, out, errOut := runArgs(append([]string{"stat"}, c.args...)...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.has) {
			t.Errorf("stat %v: exit %d (want %d), stdout %q, stderr %q (want %q)", c.args, code, c.code, out, errOut, c.has)
		}
	}
	if code, out, _ := runArgs("stat", "-h"); code != 0 || out != "" {
		t.Errorf("stat -h: exit %d, %q", code, out)
	}
}

// withQP counts the sessions that hold a QP: a stat command's session that
// just closed may still be listed, holding nothing, while the daemon
// cleans up.
func withQP(ss []proto.SessionStat) int {
	n := 0
	for _, s := range ss {
		if s.Objects["qp"] > 0 {
			n++
		}
	}
	return n
}
