package daemon

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// handle runs one request. fds are the descriptors that came with it;
// those it does not keep are closed. It returns the response body and a
// descriptor to pass back (or -1).
func (ss *session) handle(h proto.Header, body []byte, fds []int) (resp any, fd int, err error) {
	fd = -1
	keep := -1 // index in fds of a descriptor the request keeps
	defer func() {
		for i, f := range fds {
			if i != keep {
				unix.Close(f)
			}
		}
	}()
	d := ss.srv.cfg.Device
	switch h.Op {
	case proto.OpHello:
		var req proto.Hello
		proto.Unmarshal(body, &req)
		if ss.started {
			return nil, -1, errnoErr{unix.EINVAL, "hello twice"}
		}
		if req.Version != proto.Version {
			return nil, -1, errnoErr{unix.EPROTO, fmt.Sprintf("protocol version %d; this daemon speaks %d", req.Version, proto.Version)}
		}
		if err := ss.startPoller(); err != nil {
			return nil, -1, err
		}
		ss.started = true
		ss.procMem, ss.procErr = os.OpenFile("/proc/"+strconv.Itoa(int(ss.pid))+"/mem", os.O_RDWR, 0)
		ss.srv.log.Info("client", "session", ss.id, "pid", ss.pid, "uid", ss.uid, "comm", ss.comm)
		return &proto.HelloResp{Version: proto.Version, Session: ss.id, Device: proto.NameOf(ss.srv.cfg.Name),
			Netdev: proto.NameOf(ss.srv.cfg.Netdev), NumPorts: 1}, ss.dbFD, nil

	case proto.OpQueryDevice:
		return deviceAttr(d), -1, nil
	case proto.OpQueryPort:
		var req proto.PortReq
		proto.Unmarshal(body, &req)
		if req.Port != 1 {
			return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("port %d: the device has port 1", req.Port)}
		}
		return portAttr(d), -1, nil
	case proto.OpQueryGID:
		var req proto.IndexReq
		proto.Unmarshal(body, &req)
		g, gerr := d.GID(int(req.Index))
		if req.Port != 1 || gerr != nil {
			return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("gid %d of port %d: none", req.Index, req.Port)}
		}
		return &proto.GIDResp{GID: g.As16(), Type: 2}, -1, nil
	case proto.OpQueryPKey:
		var req proto.IndexReq
		proto.Unmarshal(body, &req)
		if req.Port != 1 || req.Index != 0 {
			return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("pkey %d of port %d: none", req.Index, req.Port)}
		}
		return &proto.PKeyResp{PKey: 0xffff}, -1, nil

	case proto.OpAllocPD:
		if err := ss.room(kindPD); err != nil {
			return nil, -1, err
		}
		pd, err := d.AllocPD()
		if err != nil {
			return nil, -1, err
		}
		hd, _ := ss.add(kindPD, &pdObj{pd: pd})
		return &proto.Handle{Handle: hd}, -1, nil
	case proto.OpDeallocPD:
		return ss.destroyHandle(body, kindPD)

	case proto.OpRegMR:
		var req proto.RegMR
		proto.Unmarshal(body, &req)
		if req.Kind == proto.MemShared {
			if len(fds) != 1 {
				return nil, -1, errnoErr{unix.EINVAL, "reg mr: shared memory needs its memfd"}
			}
			keep = 0
			defer unix.Close(fds[0]) // the mapping keeps the file
		}
		return ss.regMR(&req, fds)
	case proto.OpDeregMR:
		return ss.destroyHandle(body, kindMR)

	case proto.OpAllocMW:
		var req proto.AllocMW
		proto.Unmarshal(body, &req)
		if err := ss.room(kindMW); err != nil {
			return nil, -1, err
		}
		pd, err := get[*pdObj](ss, req.PD)
		if err != nil {
			return nil, -1, err
		}
		if req.Type != proto.MWType1 && req.Type != proto.MWType2 {
			return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("window type %d (1 or 2)", req.Type)}
		}
		mw, err := pd.pd.AllocMW(stack.MWType(req.Type))
		if err != nil {
			return nil, -1, err
		}
		hd, _ := ss.add(kindMW, &mwObj{mw: mw, pd: pd})
		return &proto.AllocMWResp{MW: hd, RKey: mw.RKey()}, -1, nil
	case proto.OpDeallocMW:
		return ss.destroyHandle(body, kindMW)
	case proto.OpBindMW:
		var req proto.BindMW
		proto.Unmarshal(body, &req)
		return ss.bindMW(&req)

	case proto.OpAttachMcast, proto.OpDetachMcast:
		var req proto.McastReq
		proto.Unmarshal(body, &req)
		o, err := get[*qpObj](ss, req.QP)
		if err != nil {
			return nil, -1, err
		}
		if h.Op == proto.OpAttachMcast {
			return nil, -1, o.q.AttachMcast(netip.AddrFrom16(req.GID))
		}
		return nil, -1, o.q.DetachMcast(netip.AddrFrom16(req.GID))

	case proto.OpCreateChannel:
		if err := ss.room(kindChannel); err != nil {
			return nil, -1, err
		}
		efd, dup, err := eventfdPair(unix.EFD_NONBLOCK)
		if err != nil {
			return nil, -1, err
		}
		hd, _ := ss.add(kindChannel, &channelObj{efd: efd})
		return &proto.ChannelResp{Channel: hd}, dup, nil
	case proto.OpDestroyChannel:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		ch, err := get[*channelObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		ss.mu.RLock()
		for _, o := range ss.objs {
			if cq, ok := o.(*cqObj); ok && cq.ch == ch {
				ss.mu.RUnlock()
				return nil, -1, errnoErr{unix.EBUSY, "destroy comp channel: a cq uses it"}
			}
		}
		ss.mu.RUnlock()
		return ss.destroyHandle(body, kindChannel)

	case proto.OpCreateCQ:
		var req proto.CreateCQ
		proto.Unmarshal(body, &req)
		return ss.createCQ(&req)
	case proto.OpDestroyCQ:
		return ss.destroyHandle(body, kindCQ)
	case proto.OpResizeCQ:
		var req proto.ResizeCQ
		proto.Unmarshal(body, &req)
		return ss.resizeCQ(&req)

	case proto.OpCreateSRQ:
		var req proto.CreateSRQ
		proto.Unmarshal(body, &req)
		return ss.createSRQ(&req)
	case proto.OpModifySRQ:
		var req proto.ModifySRQ
		proto.Unmarshal(body, &req)
		o, err := get[*srqObj](ss, req.SRQ)
		if err != nil {
			return nil, -1, err
		}
		if req.Mask&1 != 0 {
			return nil, -1, errnoErr{unix.EINVAL, "modify srq: max_wr: resize with ResizeSRQ"}
		}
		if req.Mask&2 != 0 {
			o.srq.SetLimit(int(req.Limit))
		}
		return nil, -1, nil
	case proto.OpResizeSRQ:
		var req proto.ResizeSRQ
		proto.Unmarshal(body, &req)
		return ss.resizeSRQ(&req)
	case proto.OpQuerySRQ:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		o, err := get[*srqObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		return &proto.SRQAttr{MaxWR: o.ring.Len(), MaxSGE: uint32(o.maxSGE)}, -1, nil
	case proto.OpDestroySRQ:
		return ss.destroyHandle(body, kindSRQ)

	case proto.OpCreateQP:
		var req proto.CreateQP
		proto.Unmarshal(body, &req)
		return ss.createQP(&req)
	case proto.OpModifyQP:
		var req proto.ModifyQP
		proto.Unmarshal(body, &req)
		o, err := get[*qpObj](ss, req.QP)
		if err != nil {
			return nil, -1, err
		}
		a := qpAttrFrom(&req.Attr, req.Mask)
		return nil, -1, o.q.Modify(&a, stack.AttrMask(req.Mask))
	case proto.OpQueryQP:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		o, err := get[*qpObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		a, init := o.q.Query()
		return &proto.QueryQPResp{Attr: qpAttrTo(&a), Init: proto.CreateQP{Type: qpTypeTo(init.Type),
			MaxSendWR: uint32(init.MaxSendWR), MaxRecvWR: uint32(init.MaxRecvWR), MaxSendSGE: uint32(init.MaxSendSGE),
			MaxRecvSGE: uint32(init.MaxRecvSGE), MaxInline: uint32(init.MaxInline), SigAll: b2u(init.SignalAll)}}, -1, nil
	case proto.OpDestroyQP:
		return ss.destroyHandle(body, kindQP)

	case proto.OpCreateAH:
		var req proto.CreateAH
		proto.Unmarshal(body, &req)
		if err := ss.room(kindAH); err != nil {
			return nil, -1, err
		}
		pd, err := get[*pdObj](ss, req.PD)
		if err != nil {
			return nil, -1, err
		}
		ah, err := pd.pd.CreateAH(ahAttrFrom(&req.Attr))
		if err != nil {
			return nil, -1, err
		}
		hd, _ := ss.add(kindAH, &ahObj{ah: ah, pd: pd})
		return &proto.CreateAHResp{AH: hd, DMAC: ah.Attr().DMAC}, -1, nil
	case proto.OpDestroyAH:
		return ss.destroyHandle(body, kindAH)

	case proto.OpCMCreateChannel, proto.OpCMDestroyChannel, proto.OpCMCreateID, proto.OpCMDestroyID,
		proto.OpCMMigrateID, proto.OpCMBind, proto.OpCMResolveAddr, proto.OpCMResolveRoute, proto.OpCMListen,
		proto.OpCMConnect, proto.OpCMAccept, proto.OpCMReject, proto.OpCMDisconnect, proto.OpCMGetEvent,
		proto.OpCMInitQPAttr, proto.OpCMEstablish:
		return ss.handleCM(h, body)

	case proto.OpStat:
		var req proto.StatReq
		proto.Unmarshal(body, &req)
		b, err := ss.srv.statJSON(req.QPN)
		return b, -1, err
	}
	return nil, -1, errnoErr{unix.EOPNOTSUPP, fmt.Sprintf("%v: not supported", h.Op)}
}

// destroyHandle destroys the object a Handle body names.
func (ss *session) destroyHandle(body []byte, k kind) (any, int, error) {
	var req proto.Handle
	proto.Unmarshal(body, &req)
	ss.mu.RLock()
	o, ok := ss.objs[req.Handle]
	ss.mu.RUnlock()
	if !ok || kindOf(o) != k {
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("no %s with handle %d", kindNames[k], req.Handle)}
	}
	if err := ss.inUse(o); err != nil {
		return nil, -1, err
	}
	if err := ss.destroy(o); err != nil {
		return nil, -1, err
	}
	ss.remove(req.Handle, k)
	return nil, -1, nil
}

// inUse refuses to destroy what another of the session's objects needs
// (the stack refuses it too; this keeps the rings mapped meanwhile).
func (ss *session) inUse(o any) error {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, x := range ss.objs {
		switch x := x.(type) {
		case *qpObj:
			if x == o && len(x.q.McastGroups()) > 0 {
				// ibv_destroy_qp's EBUSY: detach first.
				return errnoErr{unix.EBUSY, "the qp is attached to multicast groups"}
			}
			if x.sendCQ == o || x.recvCQ == o || x.srq == o || x.pd == o {
				return errnoErr{unix.EBUSY, "a qp uses it"}
			}
		case *srqObj:
			if x.pd == o {
				return errnoErr{unix.EBUSY, "an srq uses it"}
			}
		case *ahObj:
			if x.pd == o {
				return errnoErr{unix.EBUSY, "an address handle uses it"}
			}
		case *mwObj:
			if x.pd == o {
				return errnoErr{unix.EBUSY, "a memory window uses it"}
			}
		}
	}
	return nil
}

func (ss *session) regMR(req *proto.RegMR, fds []int) (any, int, error) {
	if err := ss.room(kindMR); err != nil {
		return nil, -1, err
	}
	pd, err := get[*pdObj](ss, req.PD)
	if err != nil {
		return nil, -1, err
	}
	// local write, remote write, read, atomic; MW bind; on demand; flush global, persistent
	const known = 0xf | 0x10 | accessOnDemand | 0x300
	acc := req.Access &^ (0xfff00000) // IBV_ACCESS_OPTIONAL_RANGE: hints that may be dropped
	if acc&^known != 0 {
		return nil, -1, errnoErr{unix.EOPNOTSUPP, fmt.Sprintf("reg mr: access flags %#x not supported", acc&^known)}
	}
	// On-demand paging (IBV_ACCESS_ON_DEMAND) of process memory: the
	// daemon reaches the client's pages only when a packet needs them,
	// as it does for any process memory, so nothing is checked or
	// counted ahead; the implicit region (address 0, length SIZE_MAX)
	// is the whole address space.
	odp := acc&accessOnDemand != 0 && req.Kind == proto.MemProcess
	implicit := odp && req.Addr == 0 && req.Length == math.MaxUint64
	o := &mrObj{bytes: int64(req.Length)}
	if odp {
		o.bytes = 0
	}
	lim := ss.srv.cfg.Limits.MRBytes
	ss.mu.RLock()
	used := ss.mrBytes
	ss.mu.RUnlock()
	if !odp && (req.Length > uint64(lim) || used+int64(req.Length) > lim) {
		return nil, -1, errnoErr{unix.ENOMEM, fmt.Sprintf("reg mr: %d bytes more would pass the limit of %d registered bytes per client", req.Length, lim)}
	}
	var mr *stack.MR
	switch req.Kind {
	case proto.MemShared:
		var buf []byte
		o.mapping, buf, err = mapClientMem(fds[0], req.Addr, req.Length)
		if err != nil {
			return nil, -1, err
		}
		if mr, err = pd.pd.RegisterMRAt(buf, req.IOVA, stack.Access(acc&(accessKept|accessMWBind))); err != nil {
			unix.Munmap(o.mapping)
			return nil, -1, err
		}
	case proto.MemProcess:
		if ss.procMem == nil {
			return nil, -1, errnoErr{unix.EPERM, fmt.Sprintf("reg mr: process memory: the daemon cannot reach the client's memory (%v); "+
				"run the client as the daemon's user or the daemon as root, or register shared memory", ss.procErr)}
		}
		length := req.Length
		switch {
		case implicit:
			length = math.MaxInt64
		case odp:
			if length == 0 || req.Addr+length < req.Addr || req.Addr+length > math.MaxInt64 {
				return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("reg mr: on demand: %d bytes at %#x", length, req.Addr)}
			}
		default:
			if err := readable(ss.procMem, req.Addr, length); err != nil {
				return nil, -1, err
			}
		}
		if mr, err = pd.pd.RegisterMRBacked(ss.procMem, req.Addr, int(length), req.IOVA, stack.Access(acc&(accessKept|accessMWBind))); err != nil {
			return nil, -1, err
		}
	default:
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("reg mr: memory kind %d", req.Kind)}
	}
	o.mr = mr
	ss.mu.Lock()
	ss.mrBytes += o.bytes
	ss.mu.Unlock()
	hd, _ := ss.add(kindMR, o)
	return &proto.RegMRResp{MR: hd, LKey: mr.LKey(), RKey: mr.RKey()}, -1, nil
}

// bindMW binds a type 1 window (ibv_bind_mw) through the stack's
// QP.BindMW, which posts the bind to the QP's send queue and gives the
// window the new R_Key the answer names. The handles must be the
// session's, the window of type 1 and of the QP's PD (EINVAL); the QP in
// RTS (EINVAL). A binding that fails the stack's checks (the region's
// rights, bounds, MW bind access) fails as on rdma_rxe, which makes them
// when it executes the bind: the request succeeds, its completion has
// IBV_WC_MW_BIND_ERR and the QP goes to ERR.
func (ss *session) bindMW(req *proto.BindMW) (any, int, error) {
	q, err := get[*qpObj](ss, req.QP)
	if err != nil {
		return nil, -1, err
	}
	w, err := get[*mwObj](ss, req.MW)
	if err != nil {
		return nil, -1, err
	}
	var mr *stack.MR
	if req.MR != 0 {
		o, err := get[*mrObj](ss, req.MR)
		if err != nil {
			return nil, -1, err
		}
		mr = o.mr
	}
	switch {
	case w.mw.Type() != stack.MWType1:
		return nil, -1, errnoErr{unix.EINVAL, "a type 2 window is bound with a work request"}
	case w.pd != q.pd:
		return nil, -1, errnoErr{unix.EINVAL, "the window and the qp are of different pds"}
	case q.q.State() != stack.StateRTS:
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("qp in %s", q.q.State())}
	}
	b := stack.MWBind{MR: mr, Addr: req.Addr, Length: req.Length, Access: stack.Access(req.Access)}
	err = q.q.BindMW(w.mw, req.ID, stack.SendFlags(req.Flags)&stack.SendSignaled, b)
	if errors.Is(err, stack.ErrInvalidArg) {
		q.sendCQ.ring.pushNow(&stack.WC{ID: req.ID, Status: stack.WCMWBindErr, Opcode: stack.WCBindMW, QPN: q.q.QPN()})
		err = q.q.ToErr()
	}
	if err != nil {
		return nil, -1, err
	}
	return &proto.BindMWResp{RKey: w.mw.RKey()}, -1, nil
}

func (ss *session) createCQ(req *proto.CreateCQ) (any, int, error) {
	if err := ss.room(kindCQ); err != nil {
		return nil, -1, err
	}
	var ch *channelObj
	if req.Channel != 0 {
		var err error
		if ch, err = get[*channelObj](ss, req.Channel); err != nil {
			return nil, -1, err
		}
	}
	ring, mem, fd, err := ss.newCQRing("create cq", req.CQE)
	if err != nil {
		return nil, -1, err
	}
	r := &cqRing{ring: ring, ch: ch}
	cq, err := ss.srv.cfg.Device.CreateCQWithSink(int(ring.Len()), r)
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, -1, err
	}
	hd, _ := ss.add(kindCQ, &cqObj{cq: cq, ring: r, mem: mem, ch: ch})
	return &proto.CreateCQResp{CQ: hd, CQE: ring.Len(), Slots: ring.Len(), RingBytes: uint32(len(mem))}, fd, nil
}

// newCQRing checks a CQ's size against the device's limit and makes a
// ring of at least cqe completions in a new memfd: its mapping and fd.
func (ss *session) newCQRing(what string, cqe int32) (proto.Ring, []byte, int, error) {
	maxCQE := ss.srv.cfg.Device.Query().MaxCQE
	if cqe < 1 || int(cqe) > maxCQE {
		return proto.Ring{}, nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("%s: %d entries, want 1 to %d", what, cqe, maxCQE)}
	}
	return newRing("uroce-cq", proto.Slots(int(cqe)), proto.WCLen)
}

// newRing makes a ring of slots slots of size bytes in a new memfd, its
// length rounded up to pages: the ring, its mapping and the fd.
func newRing(name string, slots, size int) (proto.Ring, []byte, int, error) {
	fd, mem, err := newRingMem(name, (proto.RingBytes(slots, size)+4095)&^4095)
	if err != nil {
		return proto.Ring{}, nil, -1, err
	}
	ring, _ := proto.NewRing(mem, slots, size)
	ring.Init()
	return ring, mem, fd, nil
}

// resizeCQ gives a CQ a new ring (ibv_resize_cq): the completions not
// yet consumed, the armed state and the counters move to it, at the same
// indices, and the engines push to it from then on. The client may go on
// consuming from the old ring meanwhile (SPEC.md, "Resizing a CQ"): it
// goes on at its own consumer index in the new ring, and the consumer
// index read here only ever counts more completions as waiting.
func (ss *session) resizeCQ(req *proto.ResizeCQ) (any, int, error) {
	o, err := get[*cqObj](ss, req.CQ)
	if err != nil {
		return nil, -1, err
	}
	ring, mem, fd, err := ss.newCQRing("resize cq", req.CQE)
	if err != nil {
		return nil, -1, err
	}
	slots := ring.Len()
	r := o.ring
	r.mu.Lock()
	old := r.ring
	cons := old.Consumer()
	if waiting := r.prod - cons; waiting > old.Len() || waiting > slots {
		r.mu.Unlock()
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("resize cq: %d completions waiting, more than %d entries", waiting, slots)}
	}
	for i := cons; i != r.prod; i++ {
		copy(ring.Slot(i), old.Slot(i))
	}
	ring.SetConsumer(cons)
	ring.SetProducer(r.pub)
	ring.SetFlags(old.SwapFlags(0)) // an arm stored in the old ring later is the client's to carry over
	ring.SetOverrun(old.Overrun())
	ring.SetEvents(old.Events())
	r.ring = ring
	r.mu.Unlock()
	unix.Munmap(o.mem)
	o.mem = mem
	return &proto.CreateCQResp{CQ: req.CQ, CQE: slots, Slots: slots, RingBytes: uint32(len(mem))}, fd, nil
}

func (ss *session) createSRQ(req *proto.CreateSRQ) (any, int, error) {
	if err := ss.room(kindSRQ); err != nil {
		return nil, -1, err
	}
	pd, err := get[*pdObj](ss, req.PD)
	if err != nil {
		return nil, -1, err
	}
	lim := ss.srv.cfg.Device.Query().Limits
	if req.MaxWR < 1 || int(req.MaxWR) > lim.MaxSRQWR || req.MaxSGE > uint32(lim.MaxSGE) {
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("create srq: max_wr %d (1 to %d), max_sge %d (up to %d)", req.MaxWR, lim.MaxSRQWR, req.MaxSGE, lim.MaxSGE)}
	}
	sge := max(int(req.MaxSGE), 1)
	slots := proto.Slots(int(req.MaxWR))
	srq, err := pd.pd.CreateSRQ(stack.SRQInit{MaxWR: slots, MaxSGE: sge, Limit: int(req.Limit)})
	if err != nil {
		return nil, -1, err
	}
	size := proto.RecvSlotBytes(sge)
	ring, mem, fd, err := newRing("uroce-srq", slots, size)
	if err != nil {
		srq.Destroy()
		return nil, -1, err
	}
	o := &srqObj{srq: srq, pd: pd, mem: mem, ring: ring, maxSGE: sge, copies: make([][]byte, pollBatch),
		wrs: make([]stack.RecvWR, pollBatch), sges: make([][]stack.SGE, pollBatch)}
	for i := range o.copies {
		o.copies[i], o.sges[i] = make([]byte, size), make([]stack.SGE, sge)
	}
	hd, _ := ss.add(kindSRQ, o)
	ss.addPolled(func() {
		l := append(append([]*srqObj(nil), *ss.srqs.Load()...), o)
		ss.srqs.Store(&l)
	}, &o.ring)
	return &proto.CreateSRQResp{SRQ: hd, MaxWR: uint32(slots), MaxSGE: uint32(sge), Slots: uint32(slots),
		SlotBytes: uint32(size), RingBytes: uint32(len(mem))}, fd, nil
}

// resizeSRQ gives an SRQ a new ring (ibv_modify_srq with IBV_SRQ_MAX_WR)
// and the stack's SRQ room for as many receives. With the engines' poller
// held off, the slots the daemon has not taken yet, up to the producer
// index it reads (Copied), move to the new ring at the same indices,
// with the consumer, posted and flags words; slots the client produces
// after that it copies itself (SPEC.md, "Resizing an SRQ"). EINVAL for a
// size out of range or below the receives the SRQ holds: posted to the
// stack's SRQ, taken and waiting for room, and in the ring.
func (ss *session) resizeSRQ(req *proto.ResizeSRQ) (any, int, error) {
	o, err := get[*srqObj](ss, req.SRQ)
	if err != nil {
		return nil, -1, err
	}
	lim := ss.srv.cfg.Device.Query().Limits
	if req.MaxWR < 1 || int(req.MaxWR) > lim.MaxSRQWR {
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("resize srq: max_wr %d, want 1 to %d", req.MaxWR, lim.MaxSRQWR)}
	}
	slots := proto.Slots(int(req.MaxWR))
	size := o.ring.SlotBytes()
	ring, mem, fd, err := newRing("uroce-srq", slots, size)
	if err != nil {
		return nil, -1, err
	}
	fail := func(e error) (any, int, error) {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, -1, e
	}
	ss.pollMu.Lock()
	old := o.ring
	prod := old.Producer()
	inRing := prod - o.cons
	if inRing > old.Len() {
		ss.pollMu.Unlock()
		return fail(errnoErr{unix.EINVAL, fmt.Sprintf("resize srq: the ring's producer index %d is past its %d slots", prod, old.Len())})
	}
	if held := o.srq.Len() + o.n + int(inRing); held > slots {
		ss.pollMu.Unlock()
		return fail(errnoErr{unix.EINVAL, fmt.Sprintf("resize srq: %d receives posted, more than %d", held, slots)})
	}
	if err := o.srq.Resize(slots); err != nil {
		ss.pollMu.Unlock()
		return fail(err)
	}
	for i := o.cons; i != prod; i++ {
		copy(ring.Slot(i), old.Slot(i))
	}
	ring.SetConsumer(o.cons)
	ring.SetProducer(prod)
	ring.SetPosted(old.Posted())
	ring.SetFlags(old.Flags())
	o.ring = ring
	oldMem := o.mem
	o.mem = mem
	ss.pollMu.Unlock()
	unix.Munmap(oldMem)
	ss.srv.cfg.Device.Wake() // the new ring may hold slots to take
	return &proto.ResizeSRQResp{MaxWR: uint32(slots), Slots: uint32(slots), SlotBytes: uint32(size),
		RingBytes: uint32(len(mem)), Copied: prod}, fd, nil
}

func (ss *session) createQP(req *proto.CreateQP) (any, int, error) {
	if err := ss.room(kindQP); err != nil {
		return nil, -1, err
	}
	pd, err := get[*pdObj](ss, req.PD)
	if err != nil {
		return nil, -1, err
	}
	scq, err := get[*cqObj](ss, req.SendCQ)
	if err != nil {
		return nil, -1, err
	}
	rcq, err := get[*cqObj](ss, req.RecvCQ)
	if err != nil {
		return nil, -1, err
	}
	var srq *srqObj
	if req.SRQ != 0 {
		if srq, err = get[*srqObj](ss, req.SRQ); err != nil {
			return nil, -1, err
		}
	}
	typ, ok := map[uint32]stack.QPType{proto.QPTypeRC: stack.RC, proto.QPTypeUC: stack.UC, proto.QPTypeUD: stack.UD}[req.Type]
	if !ok {
		return nil, -1, errnoErr{unix.EOPNOTSUPP, fmt.Sprintf("create qp: type %d not supported (RC 2, UC 3, UD 4)", req.Type)}
	}
	lim := ss.srv.cfg.Device.Query().Limits
	if req.MaxSendWR > uint32(lim.MaxQPWR) || req.MaxRecvWR > uint32(lim.MaxQPWR) ||
		req.MaxSendSGE > uint32(lim.MaxSGE) || req.MaxRecvSGE > uint32(lim.MaxSGE) || req.MaxInline > uint32(lim.MaxInline) {
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("create qp: capabilities past the device's (wr %d, sge %d, inline %d)",
			lim.MaxQPWR, lim.MaxSGE, lim.MaxInline)}
	}
	o := &qpObj{pd: pd, sendCQ: scq, recvCQ: rcq, srq: srq, typ: typ, hasRQ: srq == nil,
		maxSendSGE: max(int(req.MaxSendSGE), 1), maxRecvSGE: max(int(req.MaxRecvSGE), 1)}
	// A send slot holds the SGEs or the inline data: as rdma_rxe and the
	// RNICs grant, the inline capacity is at least what the SGEs' room
	// holds (programs send small inline messages on QPs that asked for
	// none: rdma_xclient).
	o.maxInline = min(max(int(req.MaxInline), o.maxSendSGE*proto.SGELen), lim.MaxInline)
	sendWR := proto.Slots(max(int(req.MaxSendWR), 1))
	recvWR := proto.Slots(max(int(req.MaxRecvWR), 1))
	init := stack.QPInit{Type: typ, SendCQ: scq.cq, RecvCQ: rcq.cq, MaxSendWR: sendWR, MaxRecvWR: recvWR,
		MaxSendSGE: o.maxSendSGE, MaxRecvSGE: o.maxRecvSGE, MaxInline: o.maxInline, SignalAll: req.SigAll != 0}
	if srq != nil {
		init.SRQ = srq.srq
		init.MaxRecvWR = 0
	}
	// The client counts its outstanding requests from these (SPEC.md,
	// Rings): the engine stores the count before the completion that
	// shows it is pushed.
	init.SendRetired = func(n uint64) { o.sq.SetRetired(uint32(n)) }
	q, err := pd.pd.CreateQP(init)
	if err != nil {
		return nil, -1, err
	}
	o.q = q
	fd, resp, err := o.setupRings(sendWR, recvWR)
	if err != nil {
		q.Destroy()
		return nil, -1, err
	}
	hd, _ := ss.add(kindQP, o)
	o.handle = hd
	ss.addPolled(func() {
		l := append(append([]*qpObj(nil), *ss.qps.Load()...), o)
		ss.qps.Store(&l)
	}, &o.sq, &o.rq)
	resp.QP, resp.QPN = hd, q.QPN()
	resp.MaxSendWR, resp.MaxRecvWR = uint32(sendWR), uint32(recvWR)
	if srq != nil {
		resp.MaxRecvWR = 0
	}
	resp.MaxSendSGE, resp.MaxRecvSGE, resp.MaxInline = uint32(o.maxSendSGE), uint32(o.maxRecvSGE), uint32(o.maxInline)
	return &resp, fd, nil
}

func deviceAttr(d *stack.Device) *proto.DeviceAttr {
	a := d.Query()
	return &proto.DeviceAttr{NodeGUID: a.NodeGUID, SysImageGUID: a.NodeGUID, MaxMRSize: a.MaxMRSize, PageSizeCap: 0xfffff000,
		VendorID: 0xffffff, VendorPartID: 0, HWVer: 0, MaxQP: int32(a.MaxQP), MaxQPWR: int32(a.MaxQPWR),
		MaxSGE: int32(a.MaxSGE), MaxCQ: 1 << 16, MaxCQE: int32(a.MaxCQE), MaxMR: int32(a.MaxMR), MaxPD: 1 << 16,
		MaxQPRdAtom: int32(a.MaxQPRdAtom), MaxQPInitRdAtom: int32(a.MaxQPInitRdAtom), MaxSRQ: 1 << 16,
		MaxSRQWR: int32(a.MaxSRQWR), MaxSRQSGE: int32(a.MaxSGE), MaxAH: 1 << 16, MaxInline: int32(a.MaxInline),
		MaxPKeys: uint16(a.MaxPKeys), PhysPortCnt: 1, AtomicCap: 1, FWVer: proto.NameOf("uroce"),
		// Windows share the regions' keys (stack.PD.AllocMW); type 2
		// windows are rdma_rxe's type 2B, associated with a QP.
		MaxMW:       int32(a.MaxMR),
		MaxMcastGrp: int32(a.MaxMcastGrp), MaxMcastQPAttach: int32(a.MaxMcastQPAttach),
		MaxTotalMcastQPAttach: int32(a.MaxTotalMcastQPAttach),
		DeviceCapFlags: proto.DeviceSysImageGUID | proto.DeviceRCRNRNAKGen | proto.DeviceSRQResize | proto.DeviceMemWindow |
			proto.DeviceMemWindowType2B | proto.DeviceMemMgtExt}
}

func portAttr(d *stack.Device) *proto.PortAttr {
	a := d.Query()
	return &proto.PortAttr{State: 4, MaxMTU: uint32(a.MaxMTU), ActiveMTU: uint32(a.ActiveMTU), GIDTblLen: int32(a.GIDTableLen),
		PortCapFlags: 0x10000 | 0x4000000, MaxMsgSz: 1 << 30, PKeyTblLen: 1, ActiveWidth: 2, ActiveSpeed: 32,
		PhysState: 5, LinkLayer: 2, LinkMTU: uint32(a.LinkMTU), MAC: [8]byte(append(a.MAC[:], 0, 0)),
		MaxVLNum: 1} // IBV_VL_VL0, as rdma_rxe reports
}

func ahAttrFrom(a *proto.AHAttr) stack.AHAttr {
	return stack.AHAttr{DGID: netip.AddrFrom16(a.DGID), SGIDIndex: int(a.SGIDIndex), TrafficClass: a.TrafficClass,
		FlowLabel: a.FlowLabel, HopLimit: a.HopLimit, DMAC: a.DMAC, SL: a.SL}
}

func ahAttrTo(a *stack.AHAttr) proto.AHAttr {
	var g [16]byte
	if a.DGID.IsValid() {
		g = a.DGID.As16()
	}
	return proto.AHAttr{DGID: g, SGIDIndex: uint8(a.SGIDIndex), TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel,
		HopLimit: a.HopLimit, IsGlobal: 1, Port: 1, DMAC: a.DMAC, SL: a.SL}
}

// accessKept are the ibv_access_flags the stack takes: local write,
// remote write, read and atomic (0xf), flush global and persistent
// (IBV_ACCESS_FLUSH_GLOBAL, _PERSISTENT: 0x300).
const accessKept = 0xf | 0x300

// accessOnDemand is IBV_ACCESS_ON_DEMAND.
const accessOnDemand = 0x40

// accessMWBind is IBV_ACCESS_MW_BIND, which regions take.
const accessMWBind = 0x10

func qpAttrFrom(a *proto.QPAttr, mask uint32) stack.QPAttr {
	s := stack.QPAttr{State: stack.QPState(a.State), CurState: stack.QPState(a.CurState), AccessFlags: stack.Access(a.AccessFlags & accessKept),
		PKeyIndex: a.PKeyIndex, Port: a.Port, QKey: a.QKey, PathMTU: stack.MTU(a.PathMTU), Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, RQPSN: stack.PSN(a.RQPSN & 0xffffff), SQPSN: stack.PSN(a.SQPSN & 0xffffff),
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, DestQPN: a.DestQPN}
	if mask&uint32(stack.AttrAV) != 0 {
		s.AH = ahAttrFrom(&a.AH)
	}
	return s
}

func qpAttrTo(a *stack.QPAttr) proto.QPAttr {
	return proto.QPAttr{State: uint32(a.State), CurState: uint32(a.CurState), PathMTU: uint32(a.PathMTU), QKey: a.QKey,
		RQPSN: uint32(a.RQPSN), SQPSN: uint32(a.SQPSN), DestQPN: a.DestQPN, AccessFlags: uint32(a.AccessFlags),
		PKeyIndex: a.PKeyIndex, Port: a.Port, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, AH: ahAttrTo(&a.AH)}
}

func qpTypeTo(t stack.QPType) uint32 {
	switch t {
	case stack.RC:
		return proto.QPTypeRC
	case stack.UC:
		return proto.QPTypeUC
	}
	return proto.QPTypeUD
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
