package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// The session's objects.

type pdObj struct {
	pd *stack.PD
}

type mrObj struct {
	mr      *stack.MR
	mapping []byte // the daemon's mapping of the client's memfd, or nil
	bytes   int64
}

// mwObj is a memory window; its binding names regions and QPs of the
// session only (the daemon resolves their handles in the session).
type mwObj struct {
	mw *stack.MW
	pd *pdObj
}

type channelObj struct {
	efd int // eventfd the client waits on
}

type cqObj struct {
	cq   *stack.CQ
	ring *cqRing
	mem  []byte // the ring's mapping
	ch   *channelObj
}

type srqObj struct {
	srq    *stack.SRQ
	pd     *pdObj
	mem    []byte
	ring   proto.Ring
	cons   uint32
	maxSGE int
	// Scratch for the poller: slot copies, the requests built from
	// them, and the backlog wrs[b:b+n] waiting for room.
	copies [][]byte
	wrs    []stack.RecvWR
	sges   [][]stack.SGE
	b, n   int
}

type ahObj struct {
	ah *stack.AH
	pd *pdObj
}

// qpObj is a QP with its rings. The fields after the rings belong to the
// poller.
type qpObj struct {
	q              *stack.QP
	handle         uint32
	pd             *pdObj
	sendCQ, recvCQ *cqObj
	srq            *srqObj
	typ            stack.QPType
	mem            []byte
	sq, rq         proto.Ring
	hasRQ          bool
	maxSendSGE     int
	maxRecvSGE     int
	maxInline      int

	sqCons, rqCons uint32
	scopies        [][]byte         // slots copied from the send ring ...
	swrs           []stack.SendWR   // ... the requests built from them ...
	sst            []stack.WCStatus // ... and the status of those refused
	ssges          [][]stack.SGE
	sslot          []proto.SendSlot
	sb, sn         int    // the backlog: swrs[sb:sb+sn] wait for room
	refused        uint32 // requests refused from the send ring (proto.OffRefused)
	rcopies        [][]byte
	rwrs           []stack.RecvWR
	rst            []stack.WCStatus
	rsges          [][]stack.SGE
	rb, rn         int
}

// pollBatch is how many requests the poller takes from a ring at a time.
const pollBatch = 32

func kindOf(o any) kind {
	switch o.(type) {
	case *pdObj:
		return kindPD
	case *mrObj:
		return kindMR
	case *mwObj:
		return kindMW
	case *cqObj:
		return kindCQ
	case *channelObj:
		return kindChannel
	case *srqObj:
		return kindSRQ
	case *qpObj:
		return kindQP
	case *ahObj:
		return kindAH
	case *cmChannelObj:
		return kindCMChannel
	case *cmIDObj:
		return kindCMID
	}
	return -1
}

func kindName[T any]() string {
	var z T
	if k := kindOf(any(z)); k >= 0 {
		return kindNames[k]
	}
	return "object"
}

// destroy destroys one object the session holds, whatever its kind.
func (ss *session) destroy(o any) error {
	switch o := o.(type) {
	case *qpObj:
		return ss.destroyQP(o)
	case *ahObj:
		ss.drainUD()
		return o.ah.Destroy()
	case *srqObj:
		ss.dropSRQ(o)
		if err := o.srq.Destroy(); err != nil {
			return err
		}
		return unix.Munmap(o.mem)
	case *cqObj:
		if err := o.cq.Destroy(); err != nil {
			return err
		}
		return unix.Munmap(o.mem)
	case *mrObj:
		return ss.deregister(o)
	case *mwObj:
		return o.mw.Dealloc()
	case *channelObj:
		return unix.Close(o.efd)
	case *pdObj:
		return o.pd.Dealloc()
	case *cmIDObj:
		return ss.destroyCMID(o)
	case *cmChannelObj:
		return o.close()
	}
	return fmt.Errorf("destroy %T", o)
}

// drainUD posts what the send rings of the session's UD QPs hold: work
// requests posted before an address handle is destroyed name it, and go
// out with it (mckey destroys its handle right after posting).
func (ss *session) drainUD() {
	ss.pollMu.Lock()
	defer ss.pollMu.Unlock()
	for _, q := range *ss.qps.Load() {
		ss.drainSendUD(q)
	}
}

// drainSendUD posts what a UD QP's send ring holds, while the QP takes
// it. Called with pollMu held.
func (ss *session) drainSendUD(q *qpObj) {
	for q.typ == stack.UD && ss.drainSend(q) {
	}
}

// destroyQP takes the QP off the poller, destroys it (after which no
// engine touches it) and unmaps its rings.
func (ss *session) destroyQP(o *qpObj) error {
	ss.pollMu.Lock()
	// A UD QP's datagrams in its ring go out before it does (see
	// stack.QP.Destroy).
	ss.drainSendUD(o)
	old := *ss.qps.Load()
	l := make([]*qpObj, 0, len(old))
	for _, q := range old {
		if q != o {
			l = append(l, q)
		}
	}
	ss.qps.Store(&l)
	ss.pollMu.Unlock()
	if err := o.q.Destroy(); err != nil {
		return err
	}
	return unix.Munmap(o.mem)
}

func (ss *session) dropSRQ(o *srqObj) {
	ss.pollMu.Lock()
	old := *ss.srqs.Load()
	l := make([]*srqObj, 0, len(old))
	for _, s := range old {
		if s != o {
			l = append(l, s)
		}
	}
	ss.srqs.Store(&l)
	ss.pollMu.Unlock()
}

// deregister deregisters a region (after which no engine touches its
// memory) and unmaps it.
func (ss *session) deregister(o *mrObj) error {
	if err := o.mr.Deregister(); err != nil {
		return err
	}
	ss.mu.Lock()
	ss.mrBytes -= o.bytes
	ss.mu.Unlock()
	if o.mapping != nil {
		return unix.Munmap(o.mapping)
	}
	return nil
}
