package stack

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/qp"
)

// openManual opens a Manual device on l with address a (and ip6 when
// valid) whose neighbour table knows the other test host.
func openManual(t testing.TB, l Link, mac [6]byte, addrs []netip.Addr, clock Clock) *Device {
	return openManualWin(t, l, mac, addrs, clock, 0)
}

func openManualWin(t testing.TB, l Link, mac [6]byte, addrs []netip.Addr, clock Clock, window int) *Device {
	return openManualCfg(t, l, mac, addrs, clock, Config{SendWindow: window})
}

// openManualCfg is openManual with the device's other settings from cfg.
func openManualCfg(t testing.TB, l Link, mac [6]byte, addrs []netip.Addr, clock Clock, cfg Config) *Device {
	t.Helper()
	cfg.Link, cfg.MAC, cfg.Addrs, cfg.Manual, cfg.Clock = l, mac, addrs, true, clock
	cfg.Neighbors = StaticNeighbors{ipA: macA, ipB: macB, ip6A: macA, ip6B: macB}
	d, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenValidation(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	ctx := context.Background()
	for name, cfg := range map[string]Config{
		"no link":       {MAC: macA},
		"zero mac":      {Link: a},
		"multicast mac": {Link: a, MAC: [6]byte{1, 0, 0x5e, 0, 0, 1}},
		"tiny mtu":      {Link: a, MAC: macA, MTU: 100},
		"bad address":   {Link: a, MAC: macA, Addrs: []netip.Addr{netip.MustParseAddr("224.0.0.1")}},
		"both":          {Link: a, MAC: macA, Interface: "eth0"},
	} {
		if _, err := Open(ctx, cfg); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("%s: got %v, want ErrInvalidArg", name, err)
		}
	}
	if interfaceOpener == nil {
		if _, err := Open(ctx, Config{Interface: "eth0"}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("interface without support: got %v", err)
		}
	}
}

func TestGIDTableAndQuery(t *testing.T) {
	a, _ := pipe.New(pipe.Config{MTU: 1500})
	d := openManual(t, a, [6]byte{0x52, 0x54, 0, 0, 2, 1}, []netip.Addr{ip6A, ipA, netip.MustParseAddr("198.51.100.7")}, nil)
	want := []string{"fe80::5054:ff:fe00:201", "::ffff:192.0.2.1", "::ffff:198.51.100.7", "2001:db8::a"}
	gids := d.GIDs()
	if len(gids) != len(want) {
		t.Fatalf("gids %v, want %v", gids, want)
	}
	for i, w := range want {
		if gids[i].String() != w {
			t.Errorf("gid %d = %v, want %s", i, gids[i], w)
		}
	}
	if i := d.GIDIndex(ipA); i != 1 {
		t.Errorf("GIDIndex(%v) = %d, want 1", ipA, i)
	}
	if i := d.GIDIndex(ip6A); i != 3 {
		t.Errorf("GIDIndex(%v) = %d, want 3", ip6A, i)
	}
	if _, err := d.GID(4); err == nil {
		t.Error("GID(4) of 4 succeeded")
	}
	attr := d.Query()
	if attr.ActiveMTU != qp.MTU1024 || attr.LinkMTU != 1500 || attr.GIDTableLen != 4 {
		t.Errorf("query: active mtu %v, link mtu %d, gids %d", attr.ActiveMTU, attr.LinkMTU, attr.GIDTableLen)
	}
	if attr.NodeGUID != 0x505400fffe000201 {
		t.Errorf("node guid %#x", attr.NodeGUID)
	}
	for mtu, want := range map[int]qp.MTU{1500: qp.MTU1024, 9000: qp.MTU4096, 4200: qp.MTU4096, 4000: qp.MTU2048, 600: qp.MTU512} {
		if got := pathMTU(mtu); got != want {
			t.Errorf("pathMTU(%d) = %v, want %v", mtu, got, want)
		}
	}
}

func TestMRKeysBoundsAccess(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	pd, _ := d.AllocPD()
	pd2, _ := d.AllocPD()
	buf := make([]byte, 4096)
	if _, err := pd.RegisterMR(buf, AccessRemoteWrite); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("remote write without local write: %v", err)
	}
	if _, err := pd.RegisterMR(nil, AccessLocalWrite); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("empty buffer: %v", err)
	}
	local, err := pd.RegisterMR(buf[:1024], AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if local.RKey() != 0 {
		t.Errorf("rkey %#x of a region without remote rights, want 0", local.RKey())
	}
	ro, _ := pd.RegisterMR(buf[1024:2048], AccessRemoteRead)
	rw, _ := pd.RegisterMR(buf[2048:], AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if rw.Addr() != local.Addr()+2048 {
		t.Errorf("va %#x, want the buffer's address %#x", rw.Addr(), local.Addr()+2048)
	}
	// Keys: distinct, non-zero index.
	keys := map[uint32]bool{}
	var mrs []*MR
	for i := 0; i < 1000; i++ {
		m, err := pd.RegisterMR(buf, AccessLocalWrite|AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if keys[m.LKey()] || m.LKey()>>8 == 0 || m.LKey() != m.RKey() {
			t.Fatalf("key %#x repeated, zero index or lkey != rkey", m.LKey())
		}
		keys[m.LKey()] = true
		mrs = append(mrs, m)
	}
	// Low bytes spread: a sequential allocator would give one value.
	low := map[uint32]bool{}
	for k := range keys {
		low[k&0xff] = true
	}
	if len(low) < 100 {
		t.Errorf("only %d distinct key bytes in 1000 keys", len(low))
	}
	for _, m := range mrs {
		if err := m.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	mem := &pd.mem
	cases := []struct {
		name string
		ok   bool
		b    func() ([]byte, bool)
	}{
		{"local read", true, func() ([]byte, bool) { return mem.Local(ro.LKey(), ro.Addr(), 1024, 0) }},
		{"local write to read-only", false, func() ([]byte, bool) { return mem.Local(ro.LKey(), ro.Addr(), 8, AccessLocalWrite) }},
		{"local write", true, func() ([]byte, bool) { return mem.Local(local.LKey(), local.Addr()+1000, 24, AccessLocalWrite) }},
		{"local past end", false, func() ([]byte, bool) { return mem.Local(local.LKey(), local.Addr()+1000, 25, 0) }},
		{"local before start", false, func() ([]byte, bool) { return mem.Local(local.LKey(), local.Addr()-1, 2, 0) }},
		{"local wrong key byte", false, func() ([]byte, bool) { return mem.Local(local.LKey()^1, local.Addr(), 1, 0) }},
		{"remote via lkey-only region", false, func() ([]byte, bool) { return mem.Remote(local.LKey(), local.Addr(), 8, AccessRemoteRead) }},
		{"remote read", true, func() ([]byte, bool) { return mem.Remote(ro.RKey(), ro.Addr()+8, 16, AccessRemoteRead) }},
		{"remote write to read-only", false, func() ([]byte, bool) { return mem.Remote(ro.RKey(), ro.Addr(), 8, AccessRemoteWrite) }},
		{"remote atomic", true, func() ([]byte, bool) { return mem.Remote(rw.RKey(), rw.Addr()+8, 8, AccessRemoteAtomic) }},
		{"remote past end", false, func() ([]byte, bool) { return mem.Remote(rw.RKey(), rw.Addr()+2040, 16, AccessRemoteWrite) }},
		{"remote huge length", false, func() ([]byte, bool) { return mem.Remote(rw.RKey(), rw.Addr()+8, 0xffffffff, AccessRemoteWrite) }},
		{"remote address wrap", false, func() ([]byte, bool) { return mem.Remote(rw.RKey(), ^uint64(0)-3, 8, AccessRemoteWrite) }},
		{"remote other pd", false, func() ([]byte, bool) { return pd2.mem.Remote(rw.RKey(), rw.Addr(), 8, AccessRemoteRead) }},
		{"remote zero length", true, func() ([]byte, bool) { return mem.Remote(0xdeadbeef, 0, 0, AccessRemoteWrite) }},
	}
	for _, c := range cases {
		b, ok := c.b()
		if ok != c.ok {
			t.Errorf("%s: ok=%v, want %v", c.name, ok, c.ok)
		}
		if ok && c.name == "remote read" && (&b[0] != &buf[1024+8] || len(b) != 16) {
			t.Errorf("%s: wrong bytes", c.name)
		}
	}
	// Invalidation (SEND_WITH_INV) and deregistration.
	if pd2.mem.Invalidate(rw.RKey()) {
		t.Error("another pd invalidated the region")
	}
	if !mem.Invalidate(rw.RKey()) || rw.Valid() {
		t.Error("invalidate failed")
	}
	if _, ok := mem.Remote(rw.RKey(), rw.Addr(), 8, AccessRemoteRead); ok {
		t.Error("invalidated region still accessible")
	}
	if err := ro.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, ok := mem.Remote(ro.RKey(), ro.Addr(), 8, AccessRemoteRead); ok {
		t.Error("deregistered region still accessible")
	}
	if err := ro.Deregister(); !errors.Is(err, ErrDestroyed) {
		t.Errorf("second deregister: %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Errorf("dealloc of a pd with regions: %v", err)
	}
	local.Deregister()
	rw.Deregister()
	if err := pd.Dealloc(); err != nil {
		t.Errorf("dealloc: %v", err)
	}
	if _, err := pd.RegisterMR(buf, 0); !errors.Is(err, ErrDestroyed) {
		t.Errorf("register on a freed pd: %v", err)
	}
}

func TestMRLookupNoAllocs(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	pd, _ := d.AllocPD()
	mr, _ := pd.RegisterMR(make([]byte, 1<<16), AccessLocalWrite|AccessRemoteWrite)
	if n := testing.AllocsPerRun(1000, func() {
		pd.mem.Remote(mr.RKey(), mr.Addr()+100, 4096, AccessRemoteWrite)
		pd.mem.Local(mr.LKey(), mr.Addr(), 4096, AccessLocalWrite)
	}); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}

func TestCQPollWaitOverrun(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	if _, err := d.CreateCQ(0); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("cq of 0: %v", err)
	}
	cq, err := d.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]WC, 8)
	if cq.Poll(wcs) != 0 {
		t.Fatal("empty cq polled something")
	}
	// Wait blocks until a completion arrives.
	got := make(chan error, 1)
	go func() { got <- cq.Wait(context.Background()) }()
	time.Sleep(10 * time.Millisecond) // let it block (correct either way)
	cq.push(&WC{ID: 1})
	if err := <-got; err != nil {
		t.Fatalf("wait: %v", err)
	}
	// Many waiters, all blocked on an empty CQ, all wake for one
	// completion: each passes the wake-up on to the next.
	if n := cq.Poll(wcs); n != 1 || wcs[0].ID != 1 {
		t.Fatalf("poll: %d %v", n, wcs[:n])
	}
	const waiters = 8
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	ctx, cancelWait := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelWait()
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- cq.Wait(ctx)
		}()
	}
	for blocked := 0; blocked < waiters; {
		cq.mu.Lock()
		blocked = cq.waiters
		cq.mu.Unlock()
		runtime.Gosched()
	}
	cq.push(&WC{ID: 1})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a blocked waiter did not wake for the completion: %v", err)
		}
	}
	for i := 2; i <= 4; i++ {
		cq.push(&WC{ID: uint64(i)})
	}
	if n := cq.Poll(wcs[:2]); n != 2 || wcs[0].ID != 1 || wcs[1].ID != 2 {
		t.Fatalf("poll: %d %v", n, wcs[:n])
	}
	for i := 5; i <= 7; i++ {
		cq.push(&WC{ID: uint64(i)}) // 3, 4, 5, 6 fit; 7 is lost
	}
	if cq.Err() == nil || cq.Overruns() != 1 || d.Counters().CQOverrun != 1 {
		t.Fatalf("overrun not reported: err %v, overruns %d", cq.Err(), cq.Overruns())
	}
	if err := cq.Wait(context.Background()); !errors.Is(err, ErrCQOverrun) {
		t.Fatalf("wait on overrun cq: %v", err)
	}
	if n := cq.Poll(wcs); n != 4 || wcs[0].ID != 3 || wcs[3].ID != 6 {
		t.Fatalf("poll after overrun: %d %v", n, wcs[:n])
	}
	// Context cancellation.
	cq2, _ := d.CreateCQ(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := cq2.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with expiring context: %v", err)
	}
	if err := cq2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq2.Wait(context.Background()); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("wait on destroyed cq: %v", err)
	}
	cq3, _ := d.CreateCQ(1)
	go d.Close()
	if err := cq3.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("wait across close: %v", err)
	}
}

func TestCQPushNoAllocs(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	cq, _ := d.CreateCQ(16)
	wcs := make([]WC, 16)
	wc := WC{ID: 1}
	if n := testing.AllocsPerRun(1000, func() {
		cq.push(&wc)
		cq.Poll(wcs)
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestAH(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA, ip6A}, nil)
	pd, _ := d.AllocPD()
	ah, err := pd.CreateAH(AHAttr{DGID: netip.AddrFrom16(ipB.As16()), SGIDIndex: 1, TrafficClass: 0x02})
	if err != nil {
		t.Fatal(err)
	}
	p := ah.av.Path
	// Traffic class 2 names no DSCP: the default 26 with ECT(0).
	if p.DstMAC != macB || p.SrcMAC != macA || p.SrcIP != ipA || p.DstIP != ipB || p.TrafficClass != 26<<2|2 {
		t.Errorf("path %+v", p)
	}
	if ah.Attr().DMAC != macB {
		t.Error("resolved mac not reported")
	}
	ah6, err := pd.CreateAH(AHAttr{DGID: ip6B, SGIDIndex: 2, DMAC: [6]byte{2, 9, 9, 9, 9, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if ah6.av.Path.DstMAC != [6]byte{2, 9, 9, 9, 9, 9} || ah6.av.Path.SrcIP != ip6A {
		t.Errorf("ipv6 path %+v", ah6.av.Path)
	}
	for name, at := range map[string]AHAttr{
		"family mismatch": {DGID: ip6B, SGIDIndex: 1},
		"sgid range":      {DGID: ipB, SGIDIndex: 3},
		"no dgid":         {SGIDIndex: 1},
		"flow label":      {DGID: ip6B, SGIDIndex: 2, FlowLabel: 1 << 20},
	} {
		if _, err := pd.CreateAH(at); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := pd.CreateAH(AHAttr{DGID: netip.MustParseAddr("192.0.2.99"), SGIDIndex: 1}); !errors.Is(err, ErrNoNeighbor) {
		t.Errorf("unknown neighbour: %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Errorf("dealloc with ahs: %v", err)
	}
	ah.Destroy()
	ah6.Destroy()
	if err := pd.Dealloc(); err != nil {
		t.Error(err)
	}
}

func TestQPTable(t *testing.T) {
	var tb qpTable
	tb.init(3)
	qs := []*QP{{}, {}, {}}
	for i, q := range qs {
		if err := tb.add(q); err != nil {
			t.Fatal(err)
		}
		if q.qpn != firstQPN+uint32(i) {
			t.Errorf("qpn %#x, want %#x", q.qpn, firstQPN+i)
		}
	}
	if err := tb.add(&QP{}); !errors.Is(err, ErrNoResources) {
		t.Errorf("fourth qp: %v", err)
	}
	for _, q := range qs {
		if tb.lookup(q.qpn) != q {
			t.Errorf("lookup %#x", q.qpn)
		}
	}
	for _, n := range []uint32{0, 1, 0x10, 0x14, 0xffffff} {
		if tb.lookup(n) != nil {
			t.Errorf("lookup of %#x found a qp", n)
		}
	}
	tb.remove(qs[1])
	tb.remove(qs[0])
	if tb.lookup(qs[1].qpn) != nil {
		t.Error("removed qp still found")
	}
	q := &QP{}
	tb.add(q)
	if q.qpn != qs[1].qpn { // oldest freed number first
		t.Errorf("reused qpn %#x, want %#x", q.qpn, qs[1].qpn)
	}
	// Growth keeps entries.
	var big qpTable
	big.init(1000)
	var all []*QP
	for i := 0; i < 1000; i++ {
		q := &QP{}
		big.add(q)
		all = append(all, q)
	}
	for _, q := range all {
		if big.lookup(q.qpn) != q {
			t.Fatalf("lookup %#x after growth", q.qpn)
		}
	}
}

func TestTimerHeap(t *testing.T) {
	var h timerHeap
	var qs []*QP
	for i := 0; i < 100; i++ {
		q := &QP{heapIdx: -1, deadline: Time((i * 37) % 101)}
		qs = append(qs, q)
		h.push(q)
	}
	for i := 0; i < 100; i += 3 {
		qs[i].deadline = Time(1000 - i)
		h.fix(qs[i].heapIdx)
	}
	for i := 1; i < 100; i += 7 {
		h.remove(qs[i].heapIdx)
	}
	last := Time(-1)
	for h.len() > 0 {
		q := h.pop()
		if q.deadline < last || q.heapIdx != -1 {
			t.Fatalf("heap order: %v after %v", q.deadline, last)
		}
		last = q.deadline
	}
}

func TestCounterNames(t *testing.T) {
	var c Counters
	names := map[string]bool{}
	c.Each(func(name string, v uint64) {
		if names[name] {
			t.Errorf("counter %s twice", name)
		}
		names[name] = true
	})
	// Every field of qp.Counters has a name.
	n := reflect.TypeOf(qp.Counters{}).NumField()
	if len(qpCounterFields) != n {
		t.Errorf("%d qp counter names for %d fields", len(qpCounterFields), n)
	}
	var qc qp.Counters
	v := reflect.ValueOf(&qc).Elem()
	for i := 0; i < n; i++ {
		v.Field(i).SetUint(uint64(i + 1))
	}
	seen := map[uint64]bool{}
	EachQPCounter(&qc, func(name string, x uint64) { seen[x] = true })
	if len(seen) != n {
		t.Errorf("qp counter names cover %d of %d fields", len(seen), n)
	}
	for _, want := range []string{"rcv_icrc_err", "rcvd_pkts", "sent_pkts", "out_of_sequence", "duplicate_request",
		"local_ack_timeout_err", "rnr_nak_retry_err", "packet_seq_err", "rcv_unknown_qpn", "cq_overrun"} {
		if !names[want] {
			t.Errorf("no counter %s", want)
		}
	}
}

func TestQPVerbsErrors(t *testing.T) {
	a, _ := pipe.New(pipe.Config{MTU: 1500})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	S := newSide(t, d, 4096, 16)
	cqOther, _ := openManual(t, func() Link { x, _ := pipe.New(pipe.Config{}); return x }(), macB, nil, nil).CreateCQ(4)
	for name, init := range map[string]QPInit{
		"no cq":       {Type: RC, MaxSendWR: 1, MaxRecvWR: 1},
		"bad type":    {Type: 9, SendCQ: S.cq, RecvCQ: S.cq, MaxSendWR: 1, MaxRecvWR: 1},
		"no send wr":  {Type: RC, SendCQ: S.cq, RecvCQ: S.cq, MaxRecvWR: 1},
		"too big":     {Type: RC, SendCQ: S.cq, RecvCQ: S.cq, MaxSendWR: 1 << 30, MaxRecvWR: 1},
		"foreign cq":  {Type: RC, SendCQ: cqOther, RecvCQ: S.cq, MaxSendWR: 1, MaxRecvWR: 1},
		"many sges":   {Type: RC, SendCQ: S.cq, RecvCQ: S.cq, MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1000},
		"huge inline": {Type: RC, SendCQ: S.cq, RecvCQ: S.cq, MaxSendWR: 1, MaxRecvWR: 1, MaxInline: 1 << 20},
	} {
		if _, err := S.pd.CreateQP(init); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("%s: %v", name, err)
		}
	}
	q := S.qp(t, RC)
	if q.State() != StateReset {
		t.Fatalf("new qp in %v", q.State())
	}
	// Work is refused before RTS, and RTR needs INIT first.
	if err := q.PostSend(&SendWR{Op: OpSend}); !errors.Is(err, ErrInvalidState) {
		t.Errorf("post send in RESET: %v", err)
	}
	if err := q.ToRTR(RTRAttr{DestQPN: 0x11, AH: AHAttr{DGID: ipB, SGIDIndex: 1}}); err == nil {
		t.Error("RESET to RTR succeeded")
	}
	if err := q.ToInit(InitAttr{AccessFlags: AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTR(RTRAttr{DestQPN: 0x11, AH: AHAttr{DGID: ipB, SGIDIndex: 1}, PathMTU: MTU4096}); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("path mtu above the port's: %v", err)
	}
	if err := q.ToRTR(RTRAttr{DestQPN: 0x11, AH: AHAttr{DGID: netip.MustParseAddr("192.0.2.200"), SGIDIndex: 1}}); !errors.Is(err, ErrNoNeighbor) {
		t.Errorf("unresolvable peer: %v", err)
	}
	if err := q.ToRTR(RTRAttr{DestQPN: 0x11, AH: AHAttr{DGID: ipB, SGIDIndex: 1}, RQPSN: 5, MaxDestRdAtomic: 4}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTS(RTSAttr{SQPSN: 9, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 2}); err != nil {
		t.Fatal(err)
	}
	attr, init := q.Query()
	if attr.State != StateRTS || attr.DestQPN != 0x11 || attr.RQPSN != 5 || attr.PathMTU != MTU1024 ||
		attr.AH.DGID != ipB || attr.AH.DMAC != macB || attr.MaxRdAtomic != 2 || init.MaxSendWR != 64 {
		t.Errorf("query: %+v %+v", attr, init)
	}
	if err := q.PostSend(&SendWR{Op: OpSend, SG: make([]SGE, 5)}); !errors.Is(err, ErrTooManySGE) {
		t.Errorf("too many sges: %v", err)
	}
	if err := S.cq.Destroy(); !errors.Is(err, ErrBusy) {
		t.Errorf("destroy of a cq in use: %v", err)
	}
	if err := q.ToErr(); err != nil {
		t.Fatal(err)
	}
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := q.Destroy(); !errors.Is(err, ErrDestroyed) {
		t.Errorf("second destroy: %v", err)
	}
	if d.qps.lookup(q.QPN()) != nil {
		t.Error("destroyed qp still in the table")
	}
	d.Close()
	if _, err := d.CreateCQ(1); !errors.Is(err, ErrClosed) {
		t.Errorf("create cq after close: %v", err)
	}
}

func TestSRQ(t *testing.T) {
	s := newSimPair(t, 1500, nil)
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	if _, err := B.pd.CreateSRQ(SRQInit{MaxWR: 0, MaxSGE: 1}); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("srq of 0: %v", err)
	}
	srq, err := B.pd.CreateSRQ(SRQInit{MaxWR: 8, MaxSGE: 1, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	var qbs []*QP
	var qas []*QP
	for i := 0; i < 3; i++ {
		qb, err := B.pd.CreateQP(QPInit{Type: RC, SendCQ: B.cq, RecvCQ: B.cq, SRQ: srq, MaxSendWR: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := qb.PostRecv(&RecvWR{}); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("post recv on an srq qp: %v", err)
		}
		qa := A.qp(t, RC)
		connect(t, qa, qb, 1, 0, 0, 0)
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	for i := 0; i < 4; i++ {
		if err := srq.PostRecv(&RecvWR{ID: uint64(100 + i), SG: []SGE{B.mr.SGE(uint64(i)*1024, 1024)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, qa := range qas {
		fill(A.buf[i*100:i*100+100], byte(i))
		if err := qa.PostSend(&SendWR{ID: uint64(i), Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(uint64(i)*100, 100)}}); err != nil {
			t.Fatal(err)
		}
	}
	pollN(t, s, A.cq, 3)
	got := pollN(t, s, B.cq, 3)
	for _, wc := range got {
		k := -1
		for i, qb := range qbs {
			if qb.QPN() == wc.QPN {
				k = i
			}
		}
		off := int(wc.ID-100) * 1024
		if k < 0 || wc.ByteLen != 100 || !bytes.Equal(B.buf[off:off+100], A.buf[k*100:k*100+100]) {
			t.Errorf("srq receive %+v", wc)
		}
	}
	if srq.Len() != 1 || !srq.LimitReached() || srq.LimitReached() {
		t.Errorf("srq: %d left, limit event not reported once", srq.Len())
	}
	if err := srq.Destroy(); !errors.Is(err, ErrBusy) {
		t.Errorf("destroy of an srq in use: %v", err)
	}
}

// twoQueueDevices opens two devices of two queues each over pipes:
// queue k to queue k, as a veth pair, or crossed (queue k to the other's
// 1-k).
func twoQueueDevices(t *testing.T, clock Clock, manual, crossed bool) (da, db *Device) {
	t.Helper()
	a0, b0 := pipe.New(pipe.Config{MTU: 9000})
	a1, b1 := pipe.New(pipe.Config{MTU: 9000})
	if crossed {
		b0, b1 = b1, b0
	}
	nb := StaticNeighbors{ipA: macA, ipB: macB}
	da, err := Open(context.Background(), Config{Links: []Link{a0, a1}, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: nb, Manual: manual, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	db, err = Open(context.Background(), Config{Links: []Link{b0, b1}, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb, Manual: manual, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// TestMultiQueueSteering runs two queues per device, cross-wired so that
// every frame arrives on a queue whose engine does not own its QP: the
// engines must hand the frames to each other.
func TestMultiQueueSteering(t *testing.T) {
	clock := NewFakeClock(0)
	da, db := twoQueueDevices(t, clock, true, true)
	s := &simPair{clock: clock, a: da, b: db}
	A, B := newSide(t, da, 1<<20, 64), newSide(t, db, 1<<20, 64)
	var wrs []SendWR
	for i := 0; i < 4; i++ {
		qa, qb := A.qp(t, RC), B.qp(t, RC)
		connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite|AccessRemoteRead)
		fill(A.buf[i<<16:(i+1)<<16], byte(i))
		wrs = append(wrs, SendWR{ID: uint64(i), Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(uint64(i)<<16, 1<<16)},
			Remote: RemoteAddr{B.mr.Addr() + uint64(i)<<16, B.mr.RKey()}})
		if err := qa.PostSend(&wrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, wc := range pollN(t, s, A.cq, 4) {
		if wc.Status != 0 {
			t.Fatalf("write: %v", wc.Status)
		}
	}
	if !bytes.Equal(A.buf[:4<<16], B.buf[:4<<16]) {
		t.Fatal("data differs")
	}
	if c := db.Counters(); c.RcvSteered == 0 || c.RcvSteerDrop != 0 {
		t.Errorf("steered %d, dropped %d", c.RcvSteered, c.RcvSteerDrop)
	}
	if q := da.Query(); q.NumQueues != 2 {
		t.Errorf("queues %d", q.NumQueues)
	}
}

// TestMultiQueuePlacement runs two queues per device, wired queue to
// queue as veth pairs are, with QP numbers that differ between the ends:
// every connected QP moves to the engine its pair of QP numbers names on
// both ends, so no frame needs a hand-off, whatever the QP numbers, and
// the QPs take turns on the engines. With the
// engines running, work is posted at once after the modifies, so that
// moves race with it (under the race detector too).
func TestMultiQueuePlacement(t *testing.T) {
	for _, run := range []bool{false, true} { // simulated steps, then the engines' goroutines
		t.Run(map[bool]string{false: "manual", true: "running"}[run], func(t *testing.T) {
			var clock Clock = NewMonotonicClock()
			fake := NewFakeClock(0)
			if !run {
				clock = fake
			}
			da, db := twoQueueDevices(t, clock, !run, false)
			A, B := newSide(t, da, 1<<20, 64), newSide(t, db, 1<<20, 64)
			B.qp(t, RC) // B's QP numbers are one ahead of A's
			const n = 8
			var qas, qbs []*QP
			for i := 0; i < n; i++ {
				qa, qb := A.qp(t, RC), B.qp(t, RC)
				connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite|AccessRemoteRead)
				qas, qbs = append(qas, qa), append(qbs, qb)
			}
			if !run { // the engines take in the modifies, as running ones do at once
				for _, d := range []*Device{da, db, da, db} {
					d.Step()
				}
			}
			for i, qa := range qas {
				fill(A.buf[i<<16:(i+1)<<16], byte(i))
				op := OpWrite
				if i%2 == 1 {
					op = OpRead // B's data to A
					fill(B.buf[i<<16:(i+1)<<16], byte(i))
				}
				wr := SendWR{ID: uint64(i), Op: op, Flags: SendSignaled, SG: []SGE{A.mr.SGE(uint64(i)<<16, 1<<16)},
					Remote: RemoteAddr{B.mr.Addr() + uint64(i)<<16, B.mr.RKey()}}
				if err := qa.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
			}
			var got []WC
			if run {
				wcs := make([]WC, 16)
				for deadline := time.Now().Add(time.Minute); len(got) < n && time.Now().Before(deadline); {
					k := A.cq.Poll(wcs)
					got = append(got, wcs[:k]...)
					if k == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			} else {
				got = pollN(t, &simPair{clock: fake, a: da, b: db}, A.cq, n)
			}
			if len(got) != n {
				t.Fatalf("%d completions of %d", len(got), n)
			}
			for _, wc := range got {
				if wc.Status != 0 {
					t.Fatalf("wr %d: %v", wc.ID, wc.Status)
				}
			}
			if !bytes.Equal(A.buf[:n<<16], B.buf[:n<<16]) {
				t.Fatal("data differs")
			}
			spread := map[*engine]int{}
			for i := range qas {
				for _, q := range []*QP{qas[i], qbs[i]} {
					want := q.dev.engines[pairEngine(q.QPN(), q.q.DestQPN(), 2)]
					if q.eng.Load() != want {
						t.Errorf("qp %#x of the pair with %#x: on another engine than its pair's", q.QPN(), q.q.DestQPN())
					}
					if q.dev == da {
						spread[want]++
					}
				}
			}
			if len(spread) != 2 || spread[da.engines[0]] != n/2 {
				t.Errorf("the QPs spread over the engines %v, want %d on each", spread, n/2)
			}
			if !run { // with engines running, a frame may come before its QP moved
				for _, d := range []*Device{da, db} {
					if c := d.Counters(); c.RcvSteered != 0 {
						t.Errorf("%d frames handed between engines", c.RcvSteered)
					}
				}
			}
		})
	}
}

// TestCQResize: a resized CQ keeps the completions waiting, in order,
// and holds as many as it was resized to; it refuses a size below what
// waits, and one out of the device's range.
func TestCQResize(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	cq, err := d.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]WC, 16)
	for i := 1; i <= 4; i++ {
		cq.push(&WC{ID: uint64(i)})
	}
	if n := cq.Poll(wcs[:2]); n != 2 { // the ring's head is not at slot 0
		t.Fatalf("poll: %d", n)
	}
	cq.push(&WC{ID: 5})
	if err := cq.Resize(2); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("resize to 2 with 3 waiting: %v", err)
	}
	if err := cq.Resize(0); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("resize to 0: %v", err)
	}
	if err := cq.Resize(d.Query().MaxCQE + 1); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("resize past max_cqe: %v", err)
	}
	if err := cq.Resize(8); err != nil || cq.Cap() != 8 {
		t.Fatalf("resize to 8: %v, cap %d", err, cq.Cap())
	}
	for i := 6; i <= 12; i++ {
		cq.push(&WC{ID: uint64(i)}) // 3..10 fit, 11 and 12 are lost
	}
	n := cq.Poll(wcs)
	if n != 8 || cq.Overruns() != 2 {
		t.Fatalf("after resize: %d polled, %d lost; want 8 and 2", n, cq.Overruns())
	}
	for i, w := range wcs[:n] {
		if w.ID != uint64(i+3) {
			t.Fatalf("completion %d is %d, want %d", i, w.ID, i+3)
		}
	}
	if err := cq.Resize(3); err != nil || cq.Cap() != 3 {
		t.Fatalf("shrink to 3: %v, cap %d", err, cq.Cap())
	}
	cq.Destroy()
	if err := cq.Resize(4); !errors.Is(err, ErrDestroyed) {
		t.Errorf("resize of a destroyed cq: %v", err)
	}
}

// TestSRQResize: a resized SRQ keeps its receives and takes as many as
// its new size; a size below what is posted is refused. (qp's
// TestSRQResize checks the order.)
func TestSRQResize(t *testing.T) {
	a, _ := pipe.New(pipe.Config{})
	d := openManual(t, a, macA, []netip.Addr{ipA}, nil)
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(SRQInit{MaxWR: 4, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := srq.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{{Addr: uint64(i), Length: 10, LKey: 1}, {Addr: 100, Length: 1, LKey: 2}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.PostRecv(&RecvWR{ID: 4}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fifth receive into 4: %v", err)
	}
	if err := srq.Resize(3); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("resize to 3 with 4 posted: %v", err)
	}
	if err := srq.Resize(0); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("resize to 0: %v", err)
	}
	if err := srq.Resize(8); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 8; i++ {
		if err := srq.PostRecv(&RecvWR{ID: uint64(i)}); err != nil {
			t.Fatalf("receive %d after the resize: %v", i, err)
		}
	}
	if srq.Len() != 8 {
		t.Fatalf("%d posted, want 8", srq.Len())
	}
}
