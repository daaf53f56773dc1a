package qp

import (
	"fmt"
	"strings"

	"github.com/uroce/uroce/bth"
)

// Limits on attribute values.
const (
	maxRdAtomicLimit = 128     // max_qp_rd_atom / max_qp_init_rd_atom
	maxMessage       = 1 << 30 // largest message (ibv max_msg_sz)
)

var attrNames = [...]struct {
	m    AttrMask
	name string
}{
	{AttrState, "STATE"}, {AttrCurState, "CUR_STATE"}, {AttrAccessFlags, "ACCESS_FLAGS"},
	{AttrPKeyIndex, "PKEY_INDEX"}, {AttrPort, "PORT"}, {AttrQKey, "QKEY"}, {AttrAV, "AV"},
	{AttrPathMTU, "PATH_MTU"}, {AttrTimeout, "TIMEOUT"}, {AttrRetryCnt, "RETRY_CNT"},
	{AttrRNRRetry, "RNR_RETRY"}, {AttrRQPSN, "RQ_PSN"}, {AttrMaxQPRdAtomic, "MAX_QP_RD_ATOMIC"},
	{AttrMinRNRTimer, "MIN_RNR_TIMER"}, {AttrSQPSN, "SQ_PSN"}, {AttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC"},
	{AttrDestQPN, "DEST_QPN"},
}

// allAttrs is every mask bit this package knows.
const allAttrs = AttrState | AttrCurState | AttrAccessFlags | AttrPKeyIndex | AttrPort | AttrQKey |
	AttrAV | AttrPathMTU | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrRQPSN | AttrMaxQPRdAtomic |
	AttrMinRNRTimer | AttrSQPSN | AttrMaxDestRdAtomic | AttrDestQPN

// String names the bits as ibverbs does without the IBV_QP_ prefix,
// joined by "|".
func (m AttrMask) String() string {
	var b strings.Builder
	for _, a := range attrNames {
		if m&a.m != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(a.name)
			m &^= a.m
		}
	}
	if m != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "0x%x", uint32(m))
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// transition is one entry of the state transition table: whether it is
// allowed and the attributes it requires and allows, per QP type.
type transition struct {
	valid    bool
	req, opt [UD + 1]AttrMask
}

// transitions[cur][next] follows the table of ib_modify_qp_is_ok in
// Linux (drivers/infiniband/core/verbs.c) restricted to RC, UC and UD
// and to the attributes this package supports (no alternate path, no
// path migration, no SQD async notification).
var transitions [StateErr + 1][StateErr + 1]transition

func per(rc, uc, ud AttrMask) [UD + 1]AttrMask {
	var m [UD + 1]AttrMask
	m[RC], m[UC], m[UD] = rc, uc, ud
	return m
}

func init() {
	t := &transitions
	for s := StateReset; s <= StateErr; s++ {
		t[s][StateReset].valid = true
		if s != StateReset {
			t[s][StateErr].valid = true
		}
	}
	t[StateReset][StateInit] = transition{valid: true, req: per(
		AttrPKeyIndex|AttrPort|AttrAccessFlags,
		AttrPKeyIndex|AttrPort|AttrAccessFlags,
		AttrPKeyIndex|AttrPort|AttrQKey)}
	t[StateInit][StateInit] = transition{valid: true, opt: per(
		AttrPKeyIndex|AttrPort|AttrAccessFlags,
		AttrPKeyIndex|AttrPort|AttrAccessFlags,
		AttrPKeyIndex|AttrPort|AttrQKey)}
	t[StateInit][StateRTR] = transition{valid: true,
		req: per(
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN,
			0),
		opt: per(
			AttrAccessFlags|AttrPKeyIndex,
			AttrAccessFlags|AttrPKeyIndex,
			AttrPKeyIndex|AttrQKey)}
	t[StateRTR][StateRTS] = transition{valid: true,
		req: per(
			AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic,
			AttrSQPSN,
			AttrSQPSN),
		opt: per(
			AttrCurState|AttrAccessFlags|AttrMinRNRTimer,
			AttrCurState|AttrAccessFlags,
			AttrCurState|AttrQKey)}
	t[StateRTS][StateRTS] = transition{valid: true, opt: per(
		AttrCurState|AttrAccessFlags|AttrMinRNRTimer,
		AttrCurState|AttrAccessFlags,
		AttrCurState|AttrQKey)}
	t[StateRTS][StateSQD] = transition{valid: true}
	t[StateSQD][StateRTS] = transition{valid: true, opt: per(
		AttrCurState|AttrAccessFlags|AttrMinRNRTimer,
		AttrCurState|AttrAccessFlags,
		AttrCurState|AttrQKey)}
	t[StateSQD][StateSQD] = transition{valid: true, opt: per(
		AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|AttrMaxDestRdAtomic|
			AttrAccessFlags|AttrPKeyIndex|AttrMinRNRTimer,
		AttrAV|AttrAccessFlags|AttrPKeyIndex,
		AttrPKeyIndex|AttrQKey)}
	t[StateSQE][StateRTS] = transition{valid: true, opt: per(
		0,
		AttrCurState|AttrAccessFlags,
		AttrCurState|AttrQKey)}
}

// checkModify validates a transition and its attribute values without
// changing the QP.
func (q *QP) checkModify(a *Attr, mask AttrMask) (State, error) {
	cur := q.state
	if mask&^allAttrs != 0 {
		return cur, fmt.Errorf("modify qp %#x: unsupported attribute bits %s: %w", q.qpn, mask&^allAttrs, ErrInvalidAttr)
	}
	next := cur
	if mask&AttrState != 0 {
		if a.State > StateErr {
			return cur, fmt.Errorf("modify qp %#x: state %d: %w", q.qpn, a.State, ErrInvalidAttr)
		}
		next = a.State
	}
	t := &transitions[cur][next]
	if !t.valid {
		return cur, fmt.Errorf("modify qp %#x: %s %s to %s: %w", q.qpn, q.typ, cur, next, ErrInvalidState)
	}
	if mask&AttrCurState != 0 && a.CurState != cur {
		return cur, fmt.Errorf("modify qp %#x: CUR_STATE %s but the qp is %s: %w", q.qpn, a.CurState, cur, ErrInvalidAttr)
	}
	req, opt := t.req[q.typ], t.opt[q.typ]
	if missing := req &^ mask; missing != 0 {
		return cur, fmt.Errorf("modify qp %#x: %s %s to %s: missing %s: %w", q.qpn, q.typ, cur, next, missing, ErrInvalidAttr)
	}
	if extra := mask &^ (req | opt | AttrState); extra != 0 {
		return cur, fmt.Errorf("modify qp %#x: %s %s to %s: %s not allowed: %w", q.qpn, q.typ, cur, next, extra, ErrInvalidAttr)
	}
	bad := func(what string, v any) error {
		return fmt.Errorf("modify qp %#x: %s %v: %w", q.qpn, what, v, ErrInvalidAttr)
	}
	if mask&AttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessFlushGlobal|AccessFlushPersistent) != 0 {
		return cur, bad("ACCESS_FLAGS", a.AccessFlags)
	}
	if mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return cur, bad("PKEY_INDEX (only index 0 exists)", a.PKeyIndex)
	}
	if mask&AttrPort != 0 && a.Port != 1 {
		return cur, bad("PORT (only port 1 exists)", a.Port)
	}
	if mask&AttrAV != 0 {
		p := &a.AV.Path
		if !p.SrcIP.IsValid() || !p.DstIP.IsValid() || (p.Version != 1 && p.SrcIP.Is4() != p.DstIP.Is4()) {
			return cur, bad("AV (source and destination addresses)", p.DstIP)
		}
	}
	if mask&AttrPathMTU != 0 && a.PathMTU.Bytes() == 0 {
		return cur, bad("PATH_MTU", a.PathMTU)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return cur, bad("TIMEOUT", a.Timeout)
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return cur, bad("RETRY_CNT", a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return cur, bad("RNR_RETRY", a.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return cur, bad("MIN_RNR_TIMER", a.MinRNRTimer)
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > maxRdAtomicLimit {
		return cur, bad("MAX_QP_RD_ATOMIC", a.MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > maxRdAtomicLimit {
		return cur, bad("MAX_DEST_RD_ATOMIC", a.MaxDestRdAtomic)
	}
	if mask&AttrDestQPN != 0 && a.DestQPN > bth.PSNMask {
		return cur, bad("DEST_QPN", a.DestQPN)
	}
	if mask&AttrRQPSN != 0 && a.RQPSN > bth.PSNMask {
		return cur, bad("RQ_PSN", a.RQPSN)
	}
	if mask&AttrSQPSN != 0 && a.SQPSN > bth.PSNMask {
		return cur, bad("SQ_PSN", a.SQPSN)
	}
	return next, nil
}

// Modify changes the QP's state and attributes following the verbs rules
// (ibv_modify_qp): the transition must be allowed, every attribute it
// requires must be in mask and no attribute outside the required and
// optional ones may be. On error nothing changes. Moving to ERR flushes
// all outstanding work requests with WCWRFlushErr; moving to RESET
// discards them without completions.
func (q *QP) Modify(now Time, a *Attr, mask AttrMask) error {
	next, err := q.checkModify(a, mask)
	if err != nil {
		return err
	}
	cur := q.state
	if next == StateReset {
		q.reset()
		return nil
	}
	at := &q.attr
	if mask&AttrAccessFlags != 0 {
		at.AccessFlags = a.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		at.PKeyIndex = a.PKeyIndex
	}
	if mask&AttrPort != 0 {
		at.Port = a.Port
	}
	if mask&AttrQKey != 0 {
		at.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		at.AV = a.AV
	}
	if mask&AttrPathMTU != 0 {
		at.PathMTU = a.PathMTU
	}
	if mask&AttrTimeout != 0 {
		at.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		at.RetryCnt = a.RetryCnt
		q.rec.retryLeft = a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		at.RNRRetry = a.RNRRetry
		q.rec.rnrLeft = a.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		at.RQPSN = a.RQPSN
		q.ePSN = a.RQPSN
		q.resp.ackCap = a.RQPSN.Add(-1)
		q.resp.nakSent = false
		q.stashClear()
	}
	if mask&AttrSQPSN != 0 {
		at.SQPSN = a.SQPSN
		q.nextPSN, q.compPSN, q.sentHigh = a.SQPSN, a.SQPSN, a.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		at.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		at.MaxDestRdAtomic = a.MaxDestRdAtomic
		q.initResponder(int(a.MaxDestRdAtomic))
	}
	if mask&AttrMinRNRTimer != 0 {
		at.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrDestQPN != 0 {
		at.DestQPN = a.DestQPN
	}
	if mask&(AttrAV|AttrDestQPN) != 0 && q.typ != UD {
		q.path = at.AV.Path
		if q.path.SrcPort == 0 {
			q.path.SrcPort = bth.SourcePort(q.path.FlowLabel, q.qpn, at.DestQPN)
		}
	}
	if q.typ == UD {
		q.mtu = q.caps.PortMTU.Bytes()
	} else if at.PathMTU != 0 {
		q.mtu = at.PathMTU.Bytes()
	}
	q.state = next
	at.State = next
	if next == StateErr && cur != StateErr {
		q.enterErr(false)
	}
	return nil
}

// Query returns the QP's attributes (ibv_query_qp).
func (q *QP) Query() Attr {
	a := q.attr
	a.State, a.CurState = q.state, q.state
	return a
}

// PSNs returns the PSN the next new request takes and the PSN the
// responder expects next (rdma resource's sq-psn and rq-psn).
func (q *QP) PSNs() (send, expected bth.PSN) { return q.nextPSN, q.ePSN }
