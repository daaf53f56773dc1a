package qp

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

var netipZero netip.Addr

// fullAttr is an Attr with every value valid.
func fullAttr(s State) Attr {
	return Attr{State: s, CurState: 0, AccessFlags: AccessRemoteWrite, PKeyIndex: 0, Port: 1, QKey: 0x1234,
		AV: AddressVector{Path: pathTo(addrA, addrB)}, PathMTU: MTU1024, Timeout: 14, RetryCnt: 7,
		RNRRetry: 7, RQPSN: 100, SQPSN: 200, MaxRdAtomic: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12, DestQPN: 0x99}
}

// toState brings a fresh QP of type typ to state s along the usual path.
func toState(t *testing.T, typ Type, s State) *node {
	t.Helper()
	n := newNode(t, Caps{Type: typ, QPN: 0x20})
	steps := []struct {
		s    State
		mask [UD + 1]AttrMask
	}{
		{StateInit, per(AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrQKey)},
		{StateRTR, per(AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer, AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN, 0)},
		{StateRTS, per(AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic, AttrSQPSN, AttrSQPSN)},
		{StateSQD, per(0, 0, 0)},
	}
	if s == StateReset {
		return n
	}
	for _, st := range steps {
		a := fullAttr(st.s)
		if err := n.qp.Modify(0, &a, AttrState|st.mask[typ]); err != nil {
			t.Fatalf("to %s: %v", st.s, err)
		}
		if st.s == s {
			return n
		}
	}
	switch s {
	case StateErr:
		a := Attr{State: StateErr}
		if err := n.qp.Modify(0, &a, AttrState); err != nil {
			t.Fatal(err)
		}
	case StateSQE:
		n.qp.enterSQE()
	}
	return n
}

func TestModifyRequiredAttributes(t *testing.T) {
	cases := []struct {
		typ      Type
		from, to State
		req      AttrMask
	}{
		{RC, StateReset, StateInit, AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{UC, StateReset, StateInit, AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{UD, StateReset, StateInit, AttrPKeyIndex | AttrPort | AttrQKey},
		{RC, StateInit, StateRTR, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{UC, StateInit, StateRTR, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
		{UD, StateInit, StateRTR, 0},
		{RC, StateRTR, StateRTS, AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
		{UC, StateRTR, StateRTS, AttrSQPSN},
		{UD, StateRTR, StateRTS, AttrSQPSN},
	}
	for _, c := range cases {
		// The full required set works.
		n := toState(t, c.typ, c.from)
		a := fullAttr(c.to)
		if err := n.qp.Modify(0, &a, AttrState|c.req); err != nil {
			t.Errorf("%s %s->%s with %s: %v", c.typ, c.from, c.to, c.req, err)
		}
		if n.qp.State() != c.to {
			t.Errorf("%s: state %s, want %s", c.typ, n.qp.State(), c.to)
		}
		// Each required attribute left out is named in the error.
		for _, an := range attrNames {
			if c.req&an.m == 0 {
				continue
			}
			n := toState(t, c.typ, c.from)
			err := n.qp.Modify(0, &a, AttrState|c.req&^an.m)
			if !errors.Is(err, ErrInvalidAttr) || !strings.Contains(err.Error(), "missing "+an.name) {
				t.Errorf("%s %s->%s without %s: %v", c.typ, c.from, c.to, an.name, err)
			}
			if n.qp.State() != c.from {
				t.Errorf("failed modify changed the state to %s", n.qp.State())
			}
		}
	}
}

func TestModifyForbiddenAttributes(t *testing.T) {
	cases := []struct {
		typ      Type
		from, to State
		mask     AttrMask
		bad      string
	}{
		{UD, StateReset, StateInit, AttrPKeyIndex | AttrPort | AttrQKey | AttrAccessFlags, "ACCESS_FLAGS"},
		{RC, StateReset, StateInit, AttrPKeyIndex | AttrPort | AttrAccessFlags | AttrQKey, "QKEY"},
		{UC, StateInit, StateRTR, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC"},
		{UD, StateInit, StateRTR, AttrPathMTU, "PATH_MTU"},
		{RC, StateRTR, StateRTS, AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic | AttrRQPSN, "RQ_PSN"},
		{UC, StateRTR, StateRTS, AttrSQPSN | AttrTimeout, "TIMEOUT"},
		{RC, StateRTS, StateRTS, AttrPathMTU, "PATH_MTU"},
		{RC, StateRTS, StateErr, AttrAccessFlags, "ACCESS_FLAGS"},
		{RC, StateRTS, StateSQD, AttrSQPSN, "SQ_PSN"},
	}
	for _, c := range cases {
		n := toState(t, c.typ, c.from)
		a := fullAttr(c.to)
		a.CurState = c.from
		err := n.qp.Modify(0, &a, AttrState|c.mask)
		if !errors.Is(err, ErrInvalidAttr) || !strings.Contains(err.Error(), c.bad+" not allowed") {
			t.Errorf("%s %s->%s with %s: %v", c.typ, c.from, c.to, c.mask, err)
		}
		if n.qp.State() != c.from {
			t.Errorf("failed modify changed the state to %s", n.qp.State())
		}
	}
}

func TestModifyTransitions(t *testing.T) {
	all := []State{StateReset, StateInit, StateRTR, StateRTS, StateSQD, StateSQE, StateErr}
	// allowed[from] lists the targets reachable with a valid mask (RC/UC).
	allowed := map[State][]State{
		StateReset: {StateReset, StateInit},
		StateInit:  {StateReset, StateInit, StateRTR, StateErr},
		StateRTR:   {StateReset, StateRTS, StateErr},
		StateRTS:   {StateReset, StateRTS, StateSQD, StateErr},
		StateSQD:   {StateReset, StateRTS, StateSQD, StateErr},
		StateSQE:   {StateReset, StateRTS, StateErr},
		StateErr:   {StateReset, StateErr},
	}
	for _, typ := range []Type{UC, UD} {
		for _, from := range all {
			for _, to := range all {
				n := toState(t, typ, from)
				want := false
				for _, s := range allowed[from] {
					want = want || s == to
				}
				var mask AttrMask
				switch {
				case from == StateReset && to == StateInit && typ == UD:
					mask = AttrPKeyIndex | AttrPort | AttrQKey
				case from == StateReset && to == StateInit:
					mask = AttrPKeyIndex | AttrPort | AttrAccessFlags
				case from == StateInit && to == StateRTR && typ == UC:
					mask = AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
				case from == StateRTR && to == StateRTS:
					mask = AttrSQPSN
				}
				a := fullAttr(to)
				err := n.qp.Modify(0, &a, AttrState|mask)
				if want && err != nil {
					t.Errorf("%s %s->%s: %v", typ, from, to, err)
				}
				if !want && !errors.Is(err, ErrInvalidState) {
					t.Errorf("%s %s->%s: got %v, want ErrInvalidState", typ, from, to, err)
				}
			}
		}
	}
	// RC has no SQE state to leave: SQE->RTS takes no attributes there,
	// and RC QPs never enter SQE.
	n := toState(t, RC, StateRTS)
	a := fullAttr(StateRTS)
	a.CurState = StateRTS
	if err := n.qp.Modify(0, &a, AttrMinRNRTimer|AttrCurState); err != nil {
		t.Errorf("RC RTS->RTS with MIN_RNR_TIMER: %v", err)
	}
	a.CurState = StateRTR
	if err := n.qp.Modify(0, &a, AttrMinRNRTimer|AttrCurState); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("wrong CUR_STATE accepted: %v", err)
	}
}

func TestModifyValues(t *testing.T) {
	bad := []struct {
		name string
		set  func(a *Attr)
		mask AttrMask
	}{
		{"PATH_MTU", func(a *Attr) { a.PathMTU = 6 }, 0},
		{"PATH_MTU", func(a *Attr) { a.PathMTU = 0 }, 0},
		{"DEST_QPN", func(a *Attr) { a.DestQPN = 1 << 24 }, 0},
		{"RQ_PSN", func(a *Attr) { a.RQPSN = 1 << 24 }, 0},
		{"MAX_DEST_RD_ATOMIC", func(a *Attr) { a.MaxDestRdAtomic = 200 }, 0},
		{"MIN_RNR_TIMER", func(a *Attr) { a.MinRNRTimer = 32 }, 0},
		{"AV", func(a *Attr) { a.AV.Path.DstIP = netipZero }, 0},
		{"ACCESS_FLAGS", func(a *Attr) { a.AccessFlags = 1 << 7 }, AttrAccessFlags},
		{"PKEY_INDEX", func(a *Attr) { a.PKeyIndex = 3 }, AttrPKeyIndex},
	}
	req := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	for _, c := range bad {
		n := toState(t, RC, StateInit)
		a := fullAttr(StateRTR)
		c.set(&a)
		err := n.qp.Modify(0, &a, req|c.mask)
		if !errors.Is(err, ErrInvalidAttr) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	rts := AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	for _, c := range []struct {
		name string
		set  func(a *Attr)
	}{
		{"TIMEOUT", func(a *Attr) { a.Timeout = 32 }},
		{"RETRY_CNT", func(a *Attr) { a.RetryCnt = 8 }},
		{"RNR_RETRY", func(a *Attr) { a.RNRRetry = 8 }},
		{"SQ_PSN", func(a *Attr) { a.SQPSN = 1 << 24 }},
	} {
		n := toState(t, RC, StateRTR)
		a := fullAttr(StateRTS)
		c.set(&a)
		if err := n.qp.Modify(0, &a, rts); !errors.Is(err, ErrInvalidAttr) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	n := toState(t, RC, StateReset)
	a := fullAttr(StateInit)
	a.Port = 2
	if err := n.qp.Modify(0, &a, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("port 2: %v", err)
	}
	if err := n.qp.Modify(0, &a, AttrState|1<<14); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("unknown mask bit: %v", err)
	}
}

func TestModifyQueryAndReset(t *testing.T) {
	n := toState(t, RC, StateRTS)
	got := n.qp.Query()
	if got.State != StateRTS || got.DestQPN != 0x99 || got.PathMTU != MTU1024 || got.SQPSN != 200 || got.RQPSN != 100 {
		t.Fatalf("query %+v", got)
	}
	// Post work, then RESET: discarded without completions.
	buf := make([]byte, 64)
	lk := n.mem.reg(buf, 0x100, AccessLocalWrite)
	if err := n.qp.PostRecv(&RecvWR{ID: 1, SG: []SGE{{Addr: 0x100, Length: 64, LKey: lk}}}); err != nil {
		t.Fatal(err)
	}
	if err := n.qp.PostSend(0, &SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x100, Length: 64, LKey: lk}}}); err != nil {
		t.Fatal(err)
	}
	a := Attr{State: StateReset}
	if err := n.qp.Modify(0, &a, AttrState); err != nil {
		t.Fatal(err)
	}
	if len(n.sink.send)+len(n.sink.recv) != 0 {
		t.Fatalf("reset produced completions %+v %+v", n.sink.send, n.sink.recv)
	}
	if q := n.qp.Query(); q.State != StateReset || q.DestQPN != 0 {
		t.Fatalf("after reset %+v", q)
	}
	if err := n.qp.PostRecv(&RecvWR{ID: 1}); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("post recv in RESET: %v", err)
	}
	if err := n.qp.PostSend(0, &SendWR{ID: 1}); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("post send in RESET: %v", err)
	}
}

func TestModifyToErrFlushes(t *testing.T) {
	n := toState(t, RC, StateRTS)
	buf := make([]byte, 64)
	lk := n.mem.reg(buf, 0x100, AccessLocalWrite)
	for i := uint64(1); i <= 3; i++ {
		if err := n.qp.PostRecv(&RecvWR{ID: 10 + i, SG: []SGE{{Addr: 0x100, Length: 64, LKey: lk}}}); err != nil {
			t.Fatal(err)
		}
		fl := SendFlags(0)
		if i != 2 {
			fl = SendSignaled
		}
		if err := n.qp.PostSend(0, &SendWR{ID: i, Opcode: WRSend, Flags: fl, SG: []SGE{{Addr: 0x100, Length: 64, LKey: lk}}}); err != nil {
			t.Fatal(err)
		}
	}
	n.qp.Pump(0) // the first ones go out and wait for ACKs
	a := Attr{State: StateErr}
	if err := n.qp.Modify(0, &a, AttrState); err != nil {
		t.Fatal(err)
	}
	if len(n.sink.send) != 3 || len(n.sink.recv) != 3 {
		t.Fatalf("flush: %d send, %d recv completions", len(n.sink.send), len(n.sink.recv))
	}
	for i, wc := range n.sink.send {
		if wc.ID != uint64(i+1) || wc.Status != WCWRFlushErr {
			t.Errorf("send wc %d: %+v", i, wc)
		}
	}
	for i, wc := range n.sink.recv {
		if wc.ID != uint64(11+i) || wc.Status != WCWRFlushErr || wc.Opcode != WCRecv {
			t.Errorf("recv wc %d: %+v", i, wc)
		}
	}
	// Posting in ERR completes at once with a flush error.
	if err := n.qp.PostSend(0, &SendWR{ID: 9, Opcode: WRSend, SG: []SGE{{Addr: 0x100, Length: 64, LKey: lk}}}); err != nil {
		t.Fatal(err)
	}
	if err := n.qp.PostRecv(&RecvWR{ID: 19, SG: []SGE{{Addr: 0x100, Length: 64, LKey: lk}}}); err != nil {
		t.Fatal(err)
	}
	if wc := n.sink.send[len(n.sink.send)-1]; wc.ID != 9 || wc.Status != WCWRFlushErr {
		t.Errorf("post in ERR: %+v", wc)
	}
	if wc := n.sink.recv[len(n.sink.recv)-1]; wc.ID != 19 || wc.Status != WCWRFlushErr {
		t.Errorf("post recv in ERR: %+v", wc)
	}
	if n.qp.Busy() {
		t.Error("busy in ERR with nothing to send")
	}
	if _, ok := n.qp.Deadline(); ok {
		t.Error("timer armed in ERR")
	}
}

func TestNewValidates(t *testing.T) {
	env := Env{Mem: &fakeMem{}, Out: &recOut{t: t}, Sink: &recSink{}}
	for _, c := range []Caps{
		{Type: 0, QPN: 5, MaxSendWR: 1},
		{Type: RC, QPN: 1 << 24, MaxSendWR: 1},
		{Type: RC, QPN: 5, MaxSendWR: -1},
		{Type: RC, QPN: 5, MaxSendSGE: 1000},
		{Type: UD, QPN: 5, PortMTU: 9},
	} {
		if _, err := New(c, env); !errors.Is(err, ErrInvalidAttr) {
			t.Errorf("caps %+v: %v", c, err)
		}
	}
	if _, err := New(Caps{Type: RC, QPN: 5}, Env{}); err == nil {
		t.Error("missing env accepted")
	}
}

func TestAttrMaskString(t *testing.T) {
	if s := (AttrAV | AttrPathMTU | 1<<30).String(); s != "AV|PATH_MTU|0x40000000" {
		t.Errorf("got %q", s)
	}
	if s := AttrMask(0).String(); s != "none" {
		t.Errorf("got %q", s)
	}
}
