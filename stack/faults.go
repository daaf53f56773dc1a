package stack

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/bth"
)

// FaultDir selects the direction of the frames a FaultLink harms.
type FaultDir uint8

// Fault directions.
const (
	FaultTransmit FaultDir = 1 << iota // frames the stack transmits (the default)
	FaultReceive                       // frames the stack receives
)

// FaultConfig configures WithFaults. Probabilities are per frame and
// independent; they are drawn from a generator seeded with Seed, so a
// single-goroutine simulation replays exactly.
type FaultConfig struct {
	Seed    uint64
	Drop    float64 // lose the frame
	Dup     float64 // send it twice
	Reorder float64 // hold it until one to three later frames have passed
	Corrupt float64 // flip one bit covered by the ICRC
	// MarkCE sets ECN congestion experienced (CE) in the IP header of
	// ECN-capable frames, as a congested switch does (RFC 3168), in
	// place; the IPv4 header checksum is updated.
	MarkCE float64
	// Delay holds every frame for this long (on Clock).
	Delay time.Duration
	// ReorderHold bounds how long a reordered frame waits for later
	// frames (default 100 µs).
	ReorderHold time.Duration
	// Dir selects the directions harmed (default FaultTransmit).
	Dir FaultDir
	// Clock times Delay and ReorderHold (default: monotonic time). Use
	// the stack's clock in simulations on fake time.
	Clock Clock
	// MaxHeld bounds the frames held at once for delay, reorder and
	// corruption (default 8192); frames beyond it pass unharmed.
	MaxHeld int
}

// FaultStats counts what a FaultLink did.
type FaultStats struct {
	Frames     uint64 // frames seen
	Dropped    uint64
	Duplicated uint64
	Reordered  uint64
	Corrupted  uint64 // corrupted frames passed on (a duplicated one counts twice)
	MarkedCE   uint64 // ECN-capable frames marked CE
	Delayed    uint64
	Unharmed   uint64 // faults skipped because MaxHeld frames were held
}

// FaultLink wraps a Link and loses, duplicates, reorders, corrupts and
// delays frames (WithFaults). Corruption flips one bit in the bytes the
// ICRC covers, after the BTH's FECN/BECN byte, so a receiver counts
// every corrupted RoCE frame as an ICRC error.
type FaultLink struct {
	inner Link
	cfg   FaultConfig
	rng   *rand.Rand
	clock Clock
	max   int // frame buffer size
	pkt   bth.Packet

	free []*heldFrame
	held int // buffers in use

	// transmit side
	txDelay   fifo[*heldFrame]
	txReorder []*heldFrame
	txBacklog fifo[*heldFrame] // accepted from the caller, refused by inner
	txOut     [][]byte
	txOwned   []*heldFrame
	txPassed  uint64
	one       [1][]byte

	// receive side
	rxDelay   fifo[*heldFrame]
	rxReorder []*heldFrame
	rxTmp     [][]byte
	rxLent    []*heldFrame
	rxPassed  uint64

	frames, dropped, duplicated, reordered, corrupted, delayed, unharmed, markedCE atomic.Uint64
}

type heldFrame struct {
	buf   []byte
	due   Time
	after uint64 // reorder: release once this many frames have passed
}

// WithFaults wraps l with seeded fault injection. It works over any Link:
// the pipe, or a NIC queue.
func WithFaults(l Link, cfg FaultConfig) *FaultLink {
	if cfg.Dir == 0 {
		cfg.Dir = FaultTransmit
	}
	if cfg.ReorderHold <= 0 {
		cfg.ReorderHold = 100 * time.Microsecond
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = 8192
	}
	if cfg.Clock == nil {
		cfg.Clock = NewMonotonicClock()
	}
	return &FaultLink{
		inner: l,
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		clock: cfg.Clock,
		max:   maxFrameLen(l.MTU()),
	}
}

// Stats returns the fault counters.
func (f *FaultLink) Stats() FaultStats {
	return FaultStats{Frames: f.frames.Load(), Dropped: f.dropped.Load(), Duplicated: f.duplicated.Load(),
		Reordered: f.reordered.Load(), Corrupted: f.corrupted.Load(), MarkedCE: f.markedCE.Load(), Delayed: f.delayed.Load(),
		Unharmed: f.unharmed.Load()}
}

// Inner returns the wrapped link.
func (f *FaultLink) Inner() Link { return f.inner }

func (f *FaultLink) get(src []byte) *heldFrame {
	if f.held >= f.cfg.MaxHeld || len(src) > f.max {
		return nil
	}
	f.held++
	var h *heldFrame
	if n := len(f.free); n > 0 {
		h = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		h = &heldFrame{buf: make([]byte, 0, f.max)}
	}
	h.buf = append(h.buf[:0], src...)
	h.due, h.after = 0, 0
	return h
}

func (f *FaultLink) put(h *heldFrame) {
	f.held--
	f.free = append(f.free, h)
}

// corrupt flips one bit of b in the range the ICRC covers.
func (f *FaultLink) corrupt(b []byte) {
	lo, hi := 14, len(b)
	if err := bth.Parse(b, &f.pkt); err == nil {
		lo, hi = f.pkt.BTHOff+5, f.pkt.End
	}
	if hi <= lo {
		return
	}
	i := lo + f.rng.IntN(hi-lo)
	b[i] ^= 1 << f.rng.IntN(8)
}

// markCE sets ECN CE in b's IP header if b is an ECN-capable IP frame.
func (f *FaultLink) markCE(b []byte) {
	l3, ether := 14, uint16(0)
	if len(b) >= 14 {
		ether = uint16(b[12])<<8 | uint16(b[13])
	}
	if ether == 0x8100 && len(b) >= 18 {
		l3, ether = 18, uint16(b[16])<<8|uint16(b[17])
	}
	switch {
	case ether == 0x0800 && len(b) >= l3+20 && b[l3]>>4 == 4:
		if b[l3+1]&3 == 0 {
			return
		}
		old := uint16(b[l3])<<8 | uint16(b[l3+1])
		b[l3+1] |= 3
		// RFC 1624: HC' = ~(~HC + ~m + m').
		sum := uint32(^(uint16(b[l3+10])<<8 | uint16(b[l3+11]))) + uint32(^old) + (uint32(b[l3])<<8 | uint32(b[l3+1]))
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		c := ^uint16(sum)
		b[l3+10], b[l3+11] = byte(c>>8), byte(c)
	case ether == 0x86dd && len(b) >= l3+40 && b[l3]>>4 == 6:
		if b[l3+1]&0x30 == 0 {
			return
		}
		b[l3+1] |= 0x30
	default:
		return
	}
	f.markedCE.Add(1)
}

// verdict draws the faults of one frame.
type verdict struct{ drop, dup, reorder, corrupt, ce bool }

func (f *FaultLink) draw() verdict {
	c := &f.cfg
	f.frames.Add(1)
	var v verdict
	if c.Drop > 0 && f.rng.Float64() < c.Drop {
		v.drop = true
		f.dropped.Add(1)
		return v
	}
	v.corrupt = c.Corrupt > 0 && f.rng.Float64() < c.Corrupt
	v.dup = c.Dup > 0 && f.rng.Float64() < c.Dup
	v.reorder = c.Reorder > 0 && f.rng.Float64() < c.Reorder
	v.ce = c.MarkCE > 0 && f.rng.Float64() < c.MarkCE
	return v
}

// Receive implements Link.
func (f *FaultLink) Receive(frames [][]byte) int {
	now := f.clock.Now()
	f.flushTx(now)
	if f.cfg.Dir&FaultReceive == 0 {
		return f.inner.Receive(frames)
	}
	n := 0
	// Frames whose time has come go first: they were received earlier.
	for n < len(frames) && f.rxDelay.len() > 0 && f.rxDelay.peek().due <= now {
		h := f.rxDelay.pop()
		frames[n] = h.buf
		f.rxLent = append(f.rxLent, h)
		n++
	}
	n = f.releaseRxReorder(frames, n, now, true)
	room := len(frames) - n
	if room == 0 {
		return n
	}
	if cap(f.rxTmp) < room {
		f.rxTmp = make([][]byte, room)
	}
	tmp := f.rxTmp[:room]
	m := f.inner.Receive(tmp)
	for _, fr := range tmp[:m] {
		if n == len(frames) {
			break // cannot happen: room was counted
		}
		v := f.draw()
		if v.drop {
			continue
		}
		if v.ce {
			f.markCE(fr)
		}
		if v.corrupt || f.cfg.Delay > 0 || v.reorder {
			h := f.get(fr)
			if h == nil {
				f.unharmed.Add(1)
			} else {
				if v.corrupt {
					f.corrupt(h.buf)
					f.corrupted.Add(1)
				}
				switch {
				case f.cfg.Delay > 0:
					h.due = now + f.cfg.Delay
					f.rxDelay.push(h)
					f.delayed.Add(1)
					continue
				case v.reorder:
					h.due = now + f.cfg.ReorderHold
					h.after = f.rxPassed + 1 + uint64(f.rng.IntN(3))
					f.rxReorder = append(f.rxReorder, h)
					f.reordered.Add(1)
					continue
				}
				f.rxLent = append(f.rxLent, h)
				fr = h.buf
			}
		}
		frames[n] = fr
		n++
		f.rxPassed++
		if v.dup && n < len(frames) {
			frames[n] = fr
			n++
			f.duplicated.Add(1)
			if v.corrupt {
				f.corrupted.Add(1) // a second corrupted frame
			}
		}
		n = f.releaseRxReorder(frames, n, now, false)
	}
	return n
}

// releaseRxReorder moves reordered frames that may go into frames[n:].
func (f *FaultLink) releaseRxReorder(frames [][]byte, n int, now Time, byTime bool) int {
	k := 0
	for _, h := range f.rxReorder {
		if n < len(frames) && (f.rxPassed >= h.after || (byTime && h.due <= now)) {
			frames[n] = h.buf
			f.rxLent = append(f.rxLent, h)
			n++
			continue
		}
		f.rxReorder[k] = h
		k++
	}
	clear(f.rxReorder[k:])
	f.rxReorder = f.rxReorder[:k]
	return n
}

// Release implements Link.
func (f *FaultLink) Release() {
	f.inner.Release()
	for _, h := range f.rxLent {
		f.put(h)
	}
	clear(f.rxLent)
	f.rxLent = f.rxLent[:0]
}

// Transmit implements Link.
func (f *FaultLink) Transmit(frames [][]byte) int {
	if f.cfg.Dir&FaultTransmit == 0 {
		return f.inner.Transmit(frames)
	}
	now := f.clock.Now()
	if !f.flushTx(now) {
		return 0 // the inner link pushes back
	}
	out, owned := f.txOut[:0], f.txOwned[:0]
	for _, fr := range frames {
		v := f.draw()
		if v.drop {
			continue
		}
		if v.ce {
			f.markCE(fr)
		}
		var h *heldFrame
		if v.corrupt || f.cfg.Delay > 0 || v.reorder {
			if h = f.get(fr); h == nil {
				f.unharmed.Add(1)
			}
		}
		if h != nil {
			if v.corrupt {
				f.corrupt(h.buf)
				f.corrupted.Add(1)
			}
			switch {
			case f.cfg.Delay > 0:
				h.due = now + f.cfg.Delay
				f.txDelay.push(h)
				f.delayed.Add(1)
				if v.dup {
					if h2 := f.get(h.buf); h2 != nil {
						h2.due = h.due
						f.txDelay.push(h2)
						f.duplicated.Add(1)
						if v.corrupt {
							f.corrupted.Add(1)
						}
					}
				}
				continue
			case v.reorder:
				h.due = now + f.cfg.ReorderHold
				h.after = f.txPassed + 1 + uint64(f.rng.IntN(3))
				f.txReorder = append(f.txReorder, h)
				f.reordered.Add(1)
				continue
			}
			fr = h.buf
		}
		out = append(out, fr)
		owned = append(owned, h)
		f.txPassed++
		if v.dup {
			out = append(out, fr)
			owned = append(owned, nil)
			f.duplicated.Add(1)
			if h != nil && v.corrupt {
				f.corrupted.Add(1) // a second corrupted frame
			}
		}
		out, owned = f.releaseTxReorder(out, owned, now, false)
	}
	sent := f.inner.Transmit(out)
	for i := range out {
		h := owned[i]
		if i < sent {
			if h != nil {
				f.put(h)
			}
			continue
		}
		// Refused: keep a copy and send it before anything else.
		if h == nil {
			if h = f.get(out[i]); h == nil {
				f.dropped.Add(1) // lost: nothing to hold it in
				continue
			}
		}
		f.txBacklog.push(h)
	}
	clear(out)
	clear(owned)
	f.txOut, f.txOwned = out[:0], owned[:0]
	return len(frames)
}

// releaseTxReorder appends reordered frames that may go now.
func (f *FaultLink) releaseTxReorder(out [][]byte, owned []*heldFrame, now Time, byTime bool) ([][]byte, []*heldFrame) {
	k := 0
	for _, h := range f.txReorder {
		if f.txPassed >= h.after || (byTime && h.due <= now) {
			out = append(out, h.buf)
			owned = append(owned, h)
			continue
		}
		f.txReorder[k] = h
		k++
	}
	clear(f.txReorder[k:])
	f.txReorder = f.txReorder[:k]
	return out, owned
}

// flushTx sends held frames that are due. It reports whether the
// backlog is empty (the inner link takes frames).
func (f *FaultLink) flushTx(now Time) bool {
	if f.txBacklog.len() == 0 && f.txDelay.len() == 0 && len(f.txReorder) == 0 {
		return true
	}
	one := &f.one
	for f.txBacklog.len() > 0 {
		h := f.txBacklog.peek()
		one[0] = h.buf
		if f.inner.Transmit(one[:]) == 0 {
			return false
		}
		f.put(f.txBacklog.pop())
	}
	for f.txDelay.len() > 0 && f.txDelay.peek().due <= now {
		h := f.txDelay.peek()
		one[0] = h.buf
		if f.inner.Transmit(one[:]) == 0 {
			return false
		}
		f.put(f.txDelay.pop())
		f.txPassed++
	}
	k := 0
	for _, h := range f.txReorder {
		if h.due <= now || f.txPassed >= h.after {
			one[0] = h.buf
			if f.inner.Transmit(one[:]) == 1 {
				f.put(h)
				continue
			}
		}
		f.txReorder[k] = h
		k++
	}
	clear(f.txReorder[k:])
	f.txReorder = f.txReorder[:k]
	return f.txBacklog.len() == 0
}

// Due implements Dueer: the earliest time a held frame moves on.
func (f *FaultLink) Due() (Time, bool) {
	var t Time
	ok := false
	min := func(d Time) {
		if !ok || d < t {
			t, ok = d, true
		}
	}
	if f.txBacklog.len() > 0 {
		min(0)
	}
	if f.txDelay.len() > 0 {
		min(f.txDelay.peek().due)
	}
	if f.rxDelay.len() > 0 {
		min(f.rxDelay.peek().due)
	}
	for _, h := range f.txReorder {
		min(h.due)
	}
	for _, h := range f.rxReorder {
		min(h.due)
	}
	if d, ok2 := dueOf(f.inner); ok2 {
		min(d)
	}
	return t, ok
}

// dueOf returns l's Due when it has one.
func dueOf(l Link) (Time, bool) {
	if d, ok := l.(Dueer); ok {
		return d.Due()
	}
	return 0, false
}

// Poll implements Link. It returns by the time a held frame is due.
func (f *FaultLink) Poll(timeout time.Duration) {
	if d, ok := f.Due(); ok {
		wait := d - f.clock.Now()
		if wait < 0 {
			wait = 0
		}
		if timeout < 0 || wait < timeout {
			timeout = wait
		}
	}
	f.inner.Poll(timeout)
}

// Wake implements Link.
func (f *FaultLink) Wake() { f.inner.Wake() }

// MTU implements Link.
func (f *FaultLink) MTU() int { return f.inner.MTU() }

// Close implements Link; it closes the wrapped link and drops held frames.
func (f *FaultLink) Close() error { return f.inner.Close() }

// fifo is a growable ring buffer.
type fifo[T any] struct {
	buf        []T
	head, size int
}

func (q *fifo[T]) len() int { return q.size }

func (q *fifo[T]) push(v T) {
	if q.size == len(q.buf) {
		n := 2 * len(q.buf)
		if n == 0 {
			n = 16
		}
		nb := make([]T, n)
		for i := 0; i < q.size; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = v
	q.size++
}

func (q *fifo[T]) peek() T { return q.buf[q.head] }

func (q *fifo[T]) pop() T {
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return v
}
