package client

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/internal/spin"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// PD is a protection domain (verbs.PD).
type PD struct {
	d *Device
	h uint32
}

// Dealloc implements verbs.PD.
func (pd *PD) Dealloc() error {
	if err := pd.d.destroy(proto.OpDeallocPD, pd.h); err != nil {
		return fmt.Errorf("dealloc pd: %w", err)
	}
	return nil
}

// MR is a registered memory region (verbs.MR).
type MR struct {
	d          *Device
	h          uint32
	lkey, rkey uint32
	buf        []byte
	alloc      *alloc
}

// RegisterMR implements verbs.PD. A buffer of AllocBuffer is shared with
// the daemon; other memory the daemon reaches through the process's
// /proc/PID/mem, a system call per packet (slower; it needs the program
// to run as the daemon's user, or the daemon as root).
func (pd *PD) RegisterMR(buf []byte, access stack.Access) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("register mr: empty buffer: %w", stack.ErrInvalidArg)
	}
	p := uintptr(unsafe.Pointer(&buf[0]))
	req := proto.RegMR{PD: pd.h, Access: uint32(access), IOVA: uint64(p), Length: uint64(len(buf))}
	fd := -1
	a := pd.d.allocOf(p, len(buf))
	if a != nil {
		req.Kind, req.Addr, fd = proto.MemShared, uint64(p-a.base), a.fd
	} else {
		req.Kind, req.Addr = proto.MemProcess, uint64(p)
	}
	var r proto.RegMRResp
	if _, err := pd.d.call(proto.OpRegMR, &req, fd, &r); err != nil {
		return nil, fmt.Errorf("register mr: %w", err)
	}
	mr := &MR{d: pd.d, h: r.MR, lkey: r.LKey, rkey: r.RKey, buf: buf, alloc: a}
	pd.d.memMu.Lock()
	pd.d.mrs[mr.lkey] = mr
	pd.d.memMu.Unlock()
	return mr, nil
}

func (mr *MR) LKey() uint32  { return mr.lkey }
func (mr *MR) RKey() uint32  { return mr.rkey }
func (mr *MR) Addr() uint64  { return uint64(uintptr(unsafe.Pointer(&mr.buf[0]))) }
func (mr *MR) Len() int      { return len(mr.buf) }
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE implements verbs.MR.
func (mr *MR) SGE(off uint64, length uint32) stack.SGE {
	return stack.SGE{Addr: mr.Addr() + off, Length: length, LKey: mr.lkey}
}

// Deregister implements verbs.MR: when it returns, the daemon touches
// the memory no more.
func (mr *MR) Deregister() error {
	if err := mr.d.destroy(proto.OpDeregMR, mr.h); err != nil {
		return fmt.Errorf("deregister mr: %w", err)
	}
	mr.d.memMu.Lock()
	delete(mr.d.mrs, mr.lkey)
	mr.d.memMu.Unlock()
	return nil
}

// bytesAt returns the bytes of [addr, addr+n) of a region of this
// client, for inline data given by SGEs.
func (d *Device) bytesAt(lkey uint32, addr uint64, n uint32) ([]byte, bool) {
	d.memMu.Lock()
	mr := d.mrs[lkey]
	d.memMu.Unlock()
	if mr == nil {
		return nil, false
	}
	base := mr.Addr()
	if addr < base || addr-base+uint64(n) > uint64(len(mr.buf)) {
		return nil, false
	}
	return mr.buf[addr-base : addr-base+uint64(n)], true
}

// CQ is a completion queue (verbs.CQ), its ring mapped here.
type CQ struct {
	d    *Device
	h    uint32
	mem  []byte
	ring proto.Ring
	ch   *os.File // the CQ's own completion channel
	chH  uint32

	mu   sync.Mutex
	cons uint32
	wc   proto.WC

	resizeMu sync.Mutex // one Resize at a time
}

// CreateCQ implements verbs.Device.
func (d *Device) CreateCQ(n int) (verbs.CQ, error) {
	var chr proto.ChannelResp
	efd, err := d.call(proto.OpCreateChannel, nil, -1, &chr)
	if err != nil {
		return nil, fmt.Errorf("create cq: %w", err)
	}
	unix.SetNonblock(efd, true)
	ch := os.NewFile(uintptr(efd), "uroce-channel")
	var r proto.CreateCQResp
	fd, err := d.call(proto.OpCreateCQ, &proto.CreateCQ{CQE: int32(n), Channel: chr.Channel}, -1, &r)
	if err != nil {
		ch.Close()
		d.destroy(proto.OpDestroyChannel, chr.Channel)
		return nil, fmt.Errorf("create cq: %w", err)
	}
	mem, err := mapRing(fd, r.RingBytes)
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("create cq: %w", err)
	}
	ring, ok := proto.NewRing(mem, int(r.Slots), proto.WCLen)
	if !ok {
		unix.Munmap(mem)
		ch.Close()
		return nil, fmt.Errorf("create cq: the daemon's ring does not fit its size")
	}
	return &CQ{d: d, h: r.CQ, mem: mem, ring: ring, ch: ch, chH: chr.Channel}, nil
}

// Poll implements verbs.CQ.
func (c *CQ) Poll(wcs []stack.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	prod := c.ring.Producer()
	n := 0
	for n < len(wcs) && c.cons != prod {
		c.wc.Get(c.ring.Slot(c.cons))
		w := &c.wc
		wcs[n] = stack.WC{ID: w.ID, Status: stack.WCStatus(w.Status), Opcode: stack.WCOpcode(w.Opcode),
			Flags: stack.WCFlags(w.Flags), ByteLen: w.ByteLen, Imm: w.Imm, QPN: w.QPN, SrcQP: w.SrcQP,
			PKeyIdx: w.PKeyIndex, VendErr: w.VendorErr}
		if wcs[n].Flags&stack.WCWithInv != 0 {
			wcs[n].InvRKey, wcs[n].Imm = w.Imm, 0
		}
		c.cons++
		n++
	}
	if n > 0 {
		c.ring.SetConsumer(c.cons)
	}
	return n
}

// Wait implements verbs.CQ: it looks at the ring for waitSpin, giving
// the CPU up between looks, then arms the CQ's notification and sleeps
// on its channel. A completion event costs a wake-up of tens of
// microseconds; the answer to a request often comes sooner.
func (c *CQ) Wait(ctx context.Context) error {
	until := time.Now().Add(waitSpin)
	for i := 0; ; i++ {
		c.mu.Lock()
		ready := c.ring.Producer() != c.cons
		c.mu.Unlock()
		if ready {
			return nil
		}
		if i%16 == 15 && !time.Now().Before(until) {
			break
		}
		spin.Relax(i + 1)
	}
	for {
		c.mu.Lock()
		lost, ready := c.ring.Overrun(), c.ring.Producer() != c.cons
		c.mu.Unlock()
		if lost != 0 {
			return fmt.Errorf("wait cq: %d completions lost: %w", lost, stack.ErrCQOverrun)
		}
		if ready {
			return nil
		}
		if c.d.gone.Load() {
			return fmt.Errorf("wait cq: %w", ErrDeviceGone)
		}
		c.mu.Lock()
		c.ring.SetFlags(proto.ArmNext)
		ready = c.ring.Producer() != c.cons
		c.mu.Unlock()
		if ready {
			return nil
		}
		if err := c.d.waitFD(ctx, c.ch); err != nil {
			return fmt.Errorf("wait cq: %w", err)
		}
	}
}

// Resize implements verbs.CQ: the daemon moves the completions waiting
// to a new ring, at the same indices, which the CQ maps in place of the
// old one. Poll goes on meanwhile: what it takes from the old ring it
// does not find again in the new one, which it reads from its consumer
// index on.
func (c *CQ) Resize(n int) error {
	if n < 1 || n > math.MaxInt32 {
		return fmt.Errorf("resize cq: %d entries: %w", n, stack.ErrInvalidArg)
	}
	c.resizeMu.Lock()
	defer c.resizeMu.Unlock()
	var r proto.CreateCQResp
	fd, err := c.d.call(proto.OpResizeCQ, &proto.ResizeCQ{CQ: c.h, CQE: int32(n)}, -1, &r)
	if err != nil {
		return fmt.Errorf("resize cq: %w", err)
	}
	mem, ring, err := mapNewRing(fd, r.RingBytes, r.Slots, proto.WCLen)
	if err != nil {
		return fmt.Errorf("resize cq: %w", err)
	}
	c.mu.Lock()
	if f := c.ring.Flags(); f != 0 { // armed after the daemon moved the ring
		ring.SetFlags(f)
	}
	ring.SetConsumer(c.cons) // what Poll took from the old ring meanwhile
	old := c.mem
	c.mem, c.ring = mem, ring
	c.mu.Unlock()
	unix.Munmap(old)
	return nil
}

// Destroy implements verbs.CQ.
func (c *CQ) Destroy() error {
	if err := c.d.destroy(proto.OpDestroyCQ, c.h); err != nil {
		return fmt.Errorf("destroy cq: %w", err)
	}
	unix.Munmap(c.mem)
	c.ch.Close()
	c.d.destroy(proto.OpDestroyChannel, c.chH)
	return nil
}

// waitSpin is how long Wait looks at the ring before it sleeps.
const waitSpin = 100 * time.Microsecond

// SRQ is a shared receive queue (verbs.SRQ).
type SRQ struct {
	d      *Device
	h      uint32
	mem    []byte
	ring   proto.Ring
	maxSGE int
	mu     sync.Mutex
}

// CreateSRQ implements verbs.PD.
func (pd *PD) CreateSRQ(init stack.SRQInit) (verbs.SRQ, error) {
	var r proto.CreateSRQResp
	fd, err := pd.d.call(proto.OpCreateSRQ, &proto.CreateSRQ{PD: pd.h, MaxWR: uint32(init.MaxWR),
		MaxSGE: uint32(max(init.MaxSGE, 1)), Limit: uint32(init.Limit)}, -1, &r)
	if err != nil {
		return nil, fmt.Errorf("create srq: %w", err)
	}
	mem, err := mapRing(fd, r.RingBytes)
	if err != nil {
		return nil, fmt.Errorf("create srq: %w", err)
	}
	ring, ok := proto.NewRing(mem, int(r.Slots), int(r.SlotBytes))
	if !ok {
		unix.Munmap(mem)
		return nil, fmt.Errorf("create srq: the daemon's ring does not fit its size")
	}
	return &SRQ{d: pd.d, h: r.SRQ, mem: mem, ring: ring, maxSGE: int(r.MaxSGE)}, nil
}

// PostRecv implements verbs.SRQ.
func (s *SRQ) PostRecv(wr *stack.RecvWR) error {
	s.mu.Lock()
	err := postRecvRing(s.d, &s.ring, s.maxSGE, wr)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("post srq recv: %w", err)
	}
	return nil
}

// Resize implements verbs.SRQ (ibv_modify_srq with IBV_SRQ_MAX_WR): the
// daemon moves the receives it has not taken to a new ring, which the
// SRQ maps in place of the old one. PostRecv waits meanwhile (it holds
// the SRQ's lock for a post, its wait for the daemon included).
func (s *SRQ) Resize(n int) error {
	if n < 1 || n > math.MaxInt32 {
		return fmt.Errorf("resize srq: max_wr %d: %w", n, stack.ErrInvalidArg)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var r proto.ResizeSRQResp
	fd, err := s.d.call(proto.OpResizeSRQ, &proto.ResizeSRQ{SRQ: s.h, MaxWR: uint32(n)}, -1, &r)
	if err != nil {
		return fmt.Errorf("resize srq: %w", err)
	}
	if int(r.SlotBytes) != s.ring.SlotBytes() {
		unix.Close(fd)
		return fmt.Errorf("resize srq: the daemon's ring has slots of %d bytes, not %d", r.SlotBytes, s.ring.SlotBytes())
	}
	mem, ring, err := mapNewRing(fd, r.RingBytes, r.Slots, int(r.SlotBytes))
	if err != nil {
		return fmt.Errorf("resize srq: %w", err)
	}
	// Nothing was posted since the daemon looked (the lock is held), but
	// a producer index it did not see would be ours to carry over.
	prod := s.ring.Producer()
	for i := r.Copied; i != prod; i++ {
		copy(ring.Slot(i), s.ring.Slot(i))
	}
	ring.SetProducer(prod)
	old := s.mem
	s.mem, s.ring = mem, ring
	unix.Munmap(old)
	return nil
}

// mapNewRing maps the ring of a resize's memfd fd (bytes long, slots of
// size bytes each).
func mapNewRing(fd int, bytes, slots uint32, size int) ([]byte, proto.Ring, error) {
	mem, err := mapRing(fd, bytes)
	if err != nil {
		return nil, proto.Ring{}, err
	}
	ring, ok := proto.NewRing(mem, int(slots), size)
	if !ok {
		unix.Munmap(mem)
		return nil, proto.Ring{}, fmt.Errorf("the daemon's ring does not fit its size")
	}
	return mem, ring, nil
}

// Destroy implements verbs.SRQ.
func (s *SRQ) Destroy() error {
	if err := s.d.destroy(proto.OpDestroySRQ, s.h); err != nil {
		return fmt.Errorf("destroy srq: %w", err)
	}
	unix.Munmap(s.mem)
	return nil
}

// AH is an address handle (verbs.AH).
type AH struct {
	d    *Device
	h    uint32
	pd   *PD
	attr stack.AHAttr
}

// CreateAH implements verbs.PD.
func (pd *PD) CreateAH(attr stack.AHAttr) (verbs.AH, error) {
	req := proto.CreateAH{PD: pd.h, Attr: ahAttrTo(&attr)}
	var r proto.CreateAHResp
	if _, err := pd.d.call(proto.OpCreateAH, &req, -1, &r); err != nil {
		return nil, fmt.Errorf("create ah: %w", err)
	}
	attr.DMAC = r.DMAC
	return &AH{d: pd.d, h: r.AH, pd: pd, attr: attr}, nil
}

// Attr implements verbs.AH.
func (ah *AH) Attr() stack.AHAttr { return ah.attr }

// Destroy implements verbs.AH.
func (ah *AH) Destroy() error {
	if err := ah.d.destroy(proto.OpDestroyAH, ah.h); err != nil {
		return fmt.Errorf("destroy ah: %w", err)
	}
	return nil
}

func ahAttrTo(a *stack.AHAttr) proto.AHAttr {
	var g [16]byte
	if a.DGID.IsValid() {
		g = a.DGID.As16()
	}
	return proto.AHAttr{DGID: g, SGIDIndex: uint8(a.SGIDIndex), TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel,
		HopLimit: a.HopLimit, IsGlobal: 1, Port: 1, DMAC: a.DMAC, SL: a.SL}
}

// postRecvRing puts a receive request into a receive or SRQ ring.
func postRecvRing(d *Device, r *proto.Ring, maxSGE int, wr *stack.RecvWR) error {
	if len(wr.SG) > maxSGE {
		return fmt.Errorf("%d sges, max %d: %w", len(wr.SG), maxSGE, stack.ErrTooManySGE)
	}
	prod := r.Producer()
	if prod-r.Consumer() >= r.Len() {
		return stack.ErrQueueFull
	}
	slot := r.Slot(prod)
	s := proto.RecvSlot{ID: wr.ID, NumSGE: uint32(len(wr.SG))}
	s.Put(slot)
	for i, sg := range wr.SG {
		proto.PutSGE(slot, proto.RecvSlotHeader, i, sg.Addr, sg.Length, sg.LKey)
	}
	r.SetProducer(prod + 1)
	if r.Flags()&proto.FlagNeedWakeup != 0 {
		d.ring()
	}
	waitPosted(r, prod+1)
	return nil
}

// waitPosted waits until the daemon has posted a receive ring's requests
// up to index i to its QP or SRQ: receives are ready when ibv_post_recv
// returns. It gives up after postedWait (the queue behind the ring is
// full: the requests go in as completions make room).
func waitPosted(r *proto.Ring, i uint32) {
	if int32(r.Posted()-i) >= 0 {
		return
	}
	until := time.Now().Add(postedWait)
	for k := 0; int32(r.Posted()-i) < 0; k++ {
		if k%64 == 63 && time.Now().After(until) {
			return
		}
		spin.Relax(k + 1)
	}
}

// postedWait bounds waitPosted.
const postedWait = time.Second
