package stack

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/uroce/uroce/qp"
)

// Access is a set of memory access rights (ibv_access_flags).
type Access = qp.Access

// Access rights.
const (
	AccessLocalWrite   = qp.AccessLocalWrite
	AccessRemoteWrite  = qp.AccessRemoteWrite
	AccessRemoteRead   = qp.AccessRemoteRead
	AccessRemoteAtomic = qp.AccessRemoteAtomic
	// AccessFlushGlobal and AccessFlushPersistent let a peer's FLUSH
	// of that placement type name the region (IBV_ACCESS_FLUSH_GLOBAL,
	// IBV_ACCESS_FLUSH_PERSISTENT). Placed bytes are in memory the
	// moment they are placed, so a FLUSH only checks them.
	AccessFlushGlobal     = qp.AccessFlushGlobal
	AccessFlushPersistent = qp.AccessFlushPersistent
	// AccessMWBind lets memory windows be bound to the region
	// (IBV_ACCESS_MW_BIND).
	AccessMWBind Access = 1 << 4

	accessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal | AccessFlushPersistent
	accessAll    = AccessLocalWrite | accessRemote | AccessMWBind
)

// PD is a protection domain (ibv_pd): memory regions, address handles,
// SRQs and QPs of one PD work together; a key of another PD is refused.
type PD struct {
	dev    *Device
	handle uint32
	mem    pdMemory
	uses   uses // MRs, QPs, SRQs and AHs of the PD
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.closed.Load() {
		return nil, fmt.Errorf("alloc pd: %w", ErrClosed)
	}
	pd := &PD{dev: d, handle: d.nextPD.Add(1)}
	pd.mem.pd = pd
	return pd, nil
}

// Handle returns the PD's number, unique on its device.
func (pd *PD) Handle() uint32 { return pd.handle }

// Device returns the device of the PD.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc frees the PD (ibv_dealloc_pd). It fails with ErrBusy while
// objects created from it exist; once it succeeded no object can be
// created from the PD any more.
func (pd *PD) Dealloc() error {
	if err := pd.uses.end(); err != nil {
		return fmt.Errorf("dealloc pd: %w", err)
	}
	return nil
}

// use takes a use of the PD for an object op creates; the object gives
// it back with pd.uses.drop when it is destroyed, or op when it fails.
func (pd *PD) use(op string) error {
	if pd.dev.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if !pd.uses.take() {
		return fmt.Errorf("%s: pd: %w", op, ErrDestroyed)
	}
	return nil
}

// MR is a registered memory region (ibv_mr). Its virtual address is the
// address of its buffer, as ibverbs uses pointers: a peer addresses it by
// Addr()+offset and RKey(). The buffer must not be resized or replaced
// while registered; the stack reads and writes it from its engine
// goroutines while operations are in flight, so the application
// synchronises with the peer through completions, as with any RNIC.
//
// A region registered with RegisterMRBacked has no buffer: its bytes
// are read and written through a Backing instead.
type MR struct {
	pd     *PD
	buf    []byte
	back   Backing // instead of buf, or nil
	base   uint64  // offset in back of the region's first byte
	n      int     // length in bytes
	va     uint64
	lkey   uint32
	rkey   uint32
	access Access
	valid  atomic.Bool
	// windows counts the memory windows bound to the region (guarded by
	// the device's mrTable lock): while there are any, it cannot be
	// deregistered or invalidated.
	windows int
	// backMu is read-held by a verbs goroutine reading back (inline
	// data at post time, outside any engine batch); Deregister takes it
	// to wait for such a read.
	backMu sync.RWMutex
}

// Backing holds the bytes of a region registered with RegisterMRBacked:
// an *os.File on /proc/PID/mem, for the daemon, whose offsets are the
// client's addresses. Engines call it from their goroutines, and verbs
// calls to read inline data, several at once; a call reads or writes at
// most one packet's payload. Both must transfer all of p or fail: a
// failure (the process gone, the memory unmapped) makes the access fail
// as a bad key does, and is counted as backing_err.
type Backing interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
}

// RegisterMR registers buf (ibv_reg_mr) with the given rights. Remote
// write or atomic rights need AccessLocalWrite, as in ibverbs. The keys
// are drawn from a cryptographic generator: a 24-bit index and an 8-bit
// key, so a peer cannot guess another region's R_Key.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	return pd.RegisterMRAt(buf, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access)
}

// RegisterMRAt registers buf with the virtual address iova for its first
// byte (ibv_reg_mr_iova2): SGEs and peers address the region by iova,
// whatever buf's address is, as they do a client's memory that the
// daemon maps elsewhere.
func (pd *PD) RegisterMRAt(buf []byte, iova uint64, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("register mr: empty buffer: %w", ErrInvalidArg)
	}
	return pd.register(&MR{pd: pd, buf: buf, n: len(buf), va: iova, access: access})
}

// RegisterMRBacked registers length bytes of b, from offset base, with
// the virtual address iova for the first byte: a region whose bytes the
// stack reaches through b, a packet at a time, instead of through a
// buffer (the daemon registers a client's own memory this way, with b
// the client's /proc/PID/mem and base the client's address). Such a
// region has no Bytes. Deregister's guarantee holds as for any region:
// once it returns, b is not called for the region any more.
func (pd *PD) RegisterMRBacked(b Backing, base uint64, length int, iova uint64, access Access) (*MR, error) {
	if b == nil {
		return nil, fmt.Errorf("register mr: no backing: %w", ErrInvalidArg)
	}
	if length <= 0 {
		return nil, fmt.Errorf("register mr: length %d: %w", length, ErrInvalidArg)
	}
	if base > math.MaxInt64 || uint64(length) > math.MaxInt64-base {
		return nil, fmt.Errorf("register mr: offset %#x and length %d pass the backing's offsets: %w", base, length, ErrInvalidArg)
	}
	return pd.register(&MR{pd: pd, back: b, base: base, n: length, va: iova, access: access})
}

// register checks mr's rights and address range and enters it in the
// device's table.
func (pd *PD) register(mr *MR) (*MR, error) {
	access := mr.access
	if access&^accessAll != 0 {
		return nil, fmt.Errorf("register mr: unknown access flags %#x: %w", uint32(access&^accessAll), ErrInvalidArg)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("register mr: remote write or atomic access needs local write: %w", ErrInvalidArg)
	}
	if err := pd.use("register mr"); err != nil {
		return nil, err
	}
	if iova := mr.va; iova+uint64(mr.n) < iova {
		pd.uses.drop()
		return nil, fmt.Errorf("register mr: iova %#x and length %d wrap: %w", iova, mr.n, ErrInvalidArg)
	}
	if err := pd.dev.mrs.insert(mr); err != nil {
		pd.uses.drop()
		return nil, fmt.Errorf("register mr: %w", err)
	}
	mr.valid.Store(true)
	return mr, nil
}

// LKey returns the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the remote key, or 0 when the region grants no remote
// right (as rdma_rxe does).
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr returns the region's virtual address: the address of its first
// byte.
func (mr *MR) Addr() uint64 { return mr.va }

// Len returns the region's length in bytes.
func (mr *MR) Len() int { return mr.n }

// Bytes returns the registered buffer, or nil for a region registered
// with RegisterMRBacked.
func (mr *MR) Bytes() []byte { return mr.buf }

// Access returns the region's rights.
func (mr *MR) Access() Access { return mr.access }

// ReadAt copies the region's bytes from offset off into p while no
// engine of the device is processing a batch: what peers write there
// without a completion to say so (a UC or RC WRITE without immediate
// data) is read as a whole packet's bytes at a time, and without racing
// the engine that writes them. It is for programs that watch their
// memory; reading Bytes after a completion needs no such care. It fails
// for a region registered with RegisterMRBacked.
func (mr *MR) ReadAt(p []byte, off int64) (int, error) {
	if mr.buf == nil {
		return 0, fmt.Errorf("read mr: a backed region: %w", ErrInvalidArg)
	}
	if off < 0 || off > int64(len(mr.buf)) {
		return 0, fmt.Errorf("read mr: offset %d of %d bytes: %w", off, len(mr.buf), ErrInvalidArg)
	}
	d := mr.pd.dev
	for _, e := range d.engines {
		e.batchMu.Lock()
	}
	n := copy(p, mr.buf[off:])
	for _, e := range d.engines {
		e.batchMu.Unlock()
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// Valid reports whether the region may be accessed: it is registered and
// was not invalidated by a SEND_WITH_INV naming its R_Key or an
// OpLocalInv naming one of its keys.
func (mr *MR) Valid() bool { return mr.valid.Load() }

// SGE returns the scatter/gather element for length bytes at offset off
// of the region. It does not check bounds: the QP does, when it uses it.
func (mr *MR) SGE(off uint64, length uint32) SGE {
	return SGE{Addr: mr.va + off, Length: length, LKey: mr.lkey}
}

// Deregister removes the region (ibv_dereg_mr). When it returns, no
// engine touches the buffer (or calls the backing) any more: requests
// naming the keys fail with access errors. It fails with ErrBusy while
// memory windows are bound to the region.
func (mr *MR) Deregister() error {
	d := mr.pd.dev
	if err := d.mrs.remove(mr); err != nil {
		return fmt.Errorf("deregister mr: %w", err)
	}
	mr.valid.Store(false)
	d.quiesce()
	if mr.back != nil {
		// A verbs goroutine's read of inline data that found the
		// region valid ends before this; later ones find it invalid.
		mr.backMu.Lock()
		mr.backMu.Unlock() //nolint:staticcheck // an empty critical section is the point
	}
	mr.pd.uses.drop()
	return nil
}

// slice returns the bytes [va, va+n) of the region, or false when out of
// bounds.
func (mr *MR) slice(va uint64, n uint32) ([]byte, bool) {
	off := va - mr.va
	if va < mr.va || off > uint64(len(mr.buf)) || uint64(n) > uint64(len(mr.buf))-off {
		return nil, false
	}
	return mr.buf[off : off+uint64(n) : off+uint64(n)], true
}

// span returns the offset in the backing of the bytes [va, va+n) of a
// backed region, or false when out of bounds.
func (mr *MR) span(va uint64, n uint32) (int64, bool) {
	off := va - mr.va
	if va < mr.va || off > uint64(mr.n) || uint64(n) > uint64(mr.n)-off {
		return 0, false
	}
	return int64(mr.base + off), true
}

// inBounds reports whether [va, va+n) lies in the region.
func (mr *MR) inBounds(va uint64, n uint32) bool {
	if mr.back != nil {
		_, ok := mr.span(va, n)
		return ok
	}
	_, ok := mr.slice(va, n)
	return ok
}

// mrTable maps key indices to regions and memory windows, which share
// the index space. Lookups come from engines (per packet) and from
// posting goroutines (inline data); registration is rare.
type mrTable struct {
	mu  sync.RWMutex
	m   map[uint32]*MR // by 24-bit index
	mw  map[uint32]*MW // by 24-bit index
	max int
}

// newKey draws a key whose index no region or window uses. The caller
// holds t.mu.
func (t *mrTable) newKey() (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		key := binary.LittleEndian.Uint32(b[:])
		idx := key >> 8
		if idx == 0 || t.m[idx] != nil || t.mw[idx] != nil {
			continue
		}
		return key, nil
	}
}

func (t *mrTable) insert(mr *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint32]*MR)
	}
	if len(t.m) >= t.max {
		return fmt.Errorf("%d regions: %w", t.max, ErrNoResources)
	}
	key, err := t.newKey()
	if err != nil {
		return err
	}
	t.m[key>>8] = mr
	mr.lkey = key
	if mr.access&accessRemote != 0 {
		mr.rkey = key
	}
	return nil
}

// remove takes mr out of the table: ErrDestroyed if it is not in it,
// ErrBusy while windows are bound to it.
func (t *mrTable) remove(mr *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[mr.lkey>>8] != mr {
		return ErrDestroyed
	}
	if mr.windows > 0 {
		return fmt.Errorf("%d memory windows bound: %w", mr.windows, ErrBusy)
	}
	delete(t.m, mr.lkey>>8)
	return nil
}

func (t *mrTable) lookup(key uint32) *MR {
	t.mu.RLock()
	mr := t.m[key>>8]
	t.mu.RUnlock()
	return mr
}

func (t *mrTable) lookupMW(key uint32) *MW {
	t.mu.RLock()
	mw := t.mw[key>>8]
	t.mu.RUnlock()
	return mw
}

func (t *mrTable) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m)
}

// pdMemory is a PD's view of the region table: the regions of the PD
// by key. Each QP's qp.Memory (qpMemory) uses it; it gives the bytes of
// buffer regions itself, and none of backed regions.
type pdMemory struct{ pd *PD }

var emptyBytes = []byte{}

// localMR returns the valid region of this PD whose L_Key is lkey, if it
// grants AccessLocalWrite when need includes it.
func (m *pdMemory) localMR(lkey uint32, need Access) *MR {
	mr := m.pd.dev.mrs.lookup(lkey)
	if mr == nil || mr.lkey != lkey || mr.pd != m.pd || !mr.valid.Load() {
		return nil
	}
	if need&AccessLocalWrite != 0 && mr.access&AccessLocalWrite == 0 {
		return nil
	}
	return mr
}

// remoteMR returns the valid region of this PD that the R_Key rkey
// reaches, if the key grants the remote rights in need, with the bytes
// [lo, lo+n) the key reaches: the whole region for a region's key, the
// window for a bound memory window's (IBTA 10.6.7: an access through a
// window is checked against the window's bounds and rights). q is the
// QP the access came on: a type 2 window is reached only through the QP
// that bound it, none through a nil q.
func (m *pdMemory) remoteMR(rkey uint32, need Access, q *QP) (mr *MR, lo, n uint64) {
	t := &m.pd.dev.mrs
	if mr = t.lookup(rkey); mr == nil {
		return m.windowMR(rkey, need, q)
	}
	if mr.rkey != rkey || rkey == 0 || mr.pd != m.pd || !mr.valid.Load() {
		return nil, 0, 0
	}
	if need&accessRemote&^mr.access != 0 {
		return nil, 0, 0
	}
	return mr, mr.va, uint64(mr.n)
}

// windowMR is remoteMR for the key of a memory window.
func (m *pdMemory) windowMR(rkey uint32, need Access, q *QP) (*MR, uint64, uint64) {
	mw := m.pd.dev.mrs.lookupMW(rkey)
	if mw == nil || mw.pd != m.pd {
		return nil, 0, 0
	}
	b := mw.bound.Load()
	if b == nil || b.rkey != rkey || need&accessRemote&^b.access != 0 || !b.mr.valid.Load() ||
		(mw.typ == MWType2 && b.qp != q) {
		return nil, 0, 0
	}
	return b.mr, b.va, b.n
}

// within reports whether [va, va+n) lies in [lo, lo+size).
func within(lo, size, va uint64, n uint32) bool {
	off := va - lo
	return va >= lo && off <= size && uint64(n) <= size-off
}

// Local implements qp.Memory for buffer regions.
func (m *pdMemory) Local(lkey uint32, addr uint64, length uint32, need Access) ([]byte, bool) {
	mr := m.localMR(lkey, need)
	if mr == nil {
		return nil, false
	}
	return mr.slice(addr, length)
}

// Remote implements qp.Memory for buffer regions. A zero-length access
// is not checked (IBTA 9.4.4: the R_Key of a zero-length RDMA operation
// is ignored).
func (m *pdMemory) Remote(rkey uint32, va uint64, length uint32, need Access) ([]byte, bool) {
	if length == 0 {
		return emptyBytes, true
	}
	mr, lo, size := m.remoteMR(rkey, need, nil)
	if mr == nil || !within(lo, size, va, length) {
		return nil, false
	}
	return mr.slice(va, length)
}

// Check implements qp.Memory, for regions of both kinds.
func (m *pdMemory) Check(key uint32, addr uint64, length uint32, need Access, remote bool) bool {
	return m.check(key, addr, length, need, remote, nil)
}

// check is Check for an access that came on q.
func (m *pdMemory) check(key uint32, addr uint64, length uint32, need Access, remote bool, q *QP) bool {
	if remote {
		if length == 0 {
			return true
		}
		mr, lo, size := m.remoteMR(key, need, q)
		return mr != nil && within(lo, size, addr, length) && mr.inBounds(addr, length)
	}
	mr := m.localMR(key, need)
	return mr != nil && mr.inBounds(addr, length)
}

// Flush implements qp.Memory, for regions of both kinds: the bytes of
// backed regions are written back before the engine transmits (see
// backing.go), so before the FLUSH is answered.
func (m *pdMemory) Flush(rkey uint32, va uint64, length uint32, need Access, whole bool) bool {
	return m.flush(rkey, va, length, need, whole, nil)
}

// flush is Flush for a FLUSH that came on q.
func (m *pdMemory) flush(rkey uint32, va uint64, length uint32, need Access, whole bool, q *QP) bool {
	mr, lo, size := m.remoteMR(rkey, need, q)
	return mr != nil && (whole || within(lo, size, va, length) && mr.inBounds(va, length))
}

// Invalidate implements qp.Memory: it invalidates the type 2 memory
// window or the region of this PD whose R_Key is rkey. A type 1 window,
// a key of another PD, and a region with windows bound cannot be
// invalidated.
func (m *pdMemory) Invalidate(rkey uint32) bool { return m.pd.invalidate(rkey, false) }

// invalidate invalidates the type 2 window or region of the PD whose
// key is key: its R_Key, or with local its L_Key too (LOCAL_INV names a
// region by either).
func (pd *PD) invalidate(key uint32, local bool) bool {
	t := &pd.dev.mrs
	if key == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if mr := t.m[key>>8]; mr != nil {
		if mr.pd != pd || mr.windows > 0 || (mr.rkey != key && (!local || mr.lkey != key)) {
			return false
		}
		return mr.valid.CompareAndSwap(true, false)
	}
	mw := t.mw[key>>8]
	if mw == nil || mw.pd != pd || mw.typ != MWType2 {
		return false
	}
	b := mw.bound.Load()
	if b == nil || b.rkey != key {
		return false
	}
	mw.unbindLocked()
	return true
}
