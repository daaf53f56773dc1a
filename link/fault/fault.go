// Package fault wraps a link with seeded fault injection: loss,
// duplication, reordering, corruption, delay and ECN CE marking, in
// either direction. It works over any link.Link: the in-memory pipe
// (link/pipe), or a NIC queue.
//
//	a, b := pipe.New(pipe.Config{MTU: 1500})
//	la := fault.Wrap(a, fault.Config{Seed: 1, Drop: 0.01})
//
// Like the link it wraps, a Link is driven by one goroutine at a time;
// only Wake, Close and Stats may be called from others.
package fault

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/fifo"
	"github.com/uroce/uroce/link"
)

// Dir selects the direction of the frames a Link harms.
type Dir uint8

// Fault directions.
const (
	Transmit Dir = 1 << iota // frames the stack transmits (the default)
	Receive                  // frames the stack receives
)

// Config configures Wrap. Probabilities are per frame and independent;
// they are drawn from a generator seeded with Seed, so a
// single-goroutine simulation replays exactly.
type Config struct {
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
	// Dir selects the directions harmed (default Transmit).
	Dir Dir
	// Clock times Delay and ReorderHold (default: monotonic time). Use
	// the stack's clock in simulations on fake time.
	Clock link.Clock
	// MaxHeld bounds the frames held at once for delay, reorder and
	// corruption (default 8192); frames beyond it pass unharmed.
	MaxHeld int
	// Only, when set, picks the frames harmed (an RDMA CM RTU, the
	// requests of one QP): the others pass as they are, not delayed
	// either, and take no draw from the generator.
	Only func(frame []byte) bool
}

// Stats counts what a Link did, in both directions.
type Stats struct {
	Frames     uint64 // frames seen
	Dropped    uint64
	Duplicated uint64
	Reordered  uint64
	Corrupted  uint64 // corrupted frames passed on (a duplicated one counts twice)
	MarkedCE   uint64 // ECN-capable frames marked CE
	Delayed    uint64
	Unharmed   uint64 // faults skipped because MaxHeld frames were held
}

// Link wraps a link.Link and loses, duplicates, reorders, corrupts and
// delays frames (Wrap). Corruption flips one bit in the bytes the ICRC
// covers, after the BTH's FECN/BECN byte, so a receiver counts every
// corrupted RoCE frame as an ICRC error.
type Link struct {
	inner link.Link
	cfg   Config
	rng   *rand.Rand
	clock link.Clock
	max   int // frame buffer size
	pkt   bth.Packet

	free []*heldFrame
	held int // buffers in use

	tx, rx direction

	// transmit side only
	backlog fifo.Queue[*heldFrame] // accepted from the caller, refused by inner
	out     [][]byte               // Transmit's frames for inner
	owned   []*heldFrame           // out's held buffers (nil: the caller's)
	one     [1][]byte

	// receive side only
	tmp  [][]byte     // frames from inner
	lent []*heldFrame // held buffers handed out until Release

	frames, dropped, duplicated, reordered, corrupted, delayed, unharmed, markedCE atomic.Uint64
}

// direction is what a Link holds of the frames going one way.
type direction struct {
	delay   fifo.Queue[*heldFrame] // held for Config.Delay, in order of due time
	reorder []*heldFrame           // held until later frames have passed
	passed  uint64                 // frames passed on, that reordered ones wait for
}

type heldFrame struct {
	buf   []byte
	due   link.Time
	after uint64 // reorder: release once this many frames have passed
}

var (
	_ link.Link  = (*Link)(nil)
	_ link.Dueer = (*Link)(nil)
)

// Wrap wraps l with seeded fault injection.
func Wrap(l link.Link, cfg Config) *Link {
	if cfg.Dir == 0 {
		cfg.Dir = Transmit
	}
	if cfg.ReorderHold <= 0 {
		cfg.ReorderHold = 100 * time.Microsecond
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = 8192
	}
	if cfg.Clock == nil {
		cfg.Clock = &monoClock{start: time.Now()}
	}
	return &Link{
		inner: l,
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		clock: cfg.Clock,
		max:   link.MaxFrameLen(l.MTU()),
	}
}

// monoClock is the default clock: monotonic time since Wrap.
type monoClock struct{ start time.Time }

func (c *monoClock) Now() link.Time { return time.Since(c.start) }

// Stats returns the fault counters.
func (f *Link) Stats() Stats {
	return Stats{Frames: f.frames.Load(), Dropped: f.dropped.Load(), Duplicated: f.duplicated.Load(),
		Reordered: f.reordered.Load(), Corrupted: f.corrupted.Load(), MarkedCE: f.markedCE.Load(), Delayed: f.delayed.Load(),
		Unharmed: f.unharmed.Load()}
}

// Inner returns the wrapped link.
func (f *Link) Inner() link.Link { return f.inner }

func (f *Link) get(src []byte) *heldFrame {
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

func (f *Link) put(h *heldFrame) {
	f.held--
	f.free = append(f.free, h)
}

// corrupt flips one bit of b in the range the ICRC covers.
func (f *Link) corrupt(b []byte) {
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
func (f *Link) markCE(b []byte) {
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
type verdict struct{ drop, dup, reorder, corrupt, ce, spared bool }

func (f *Link) draw(fr []byte) verdict {
	c := &f.cfg
	f.frames.Add(1)
	var v verdict
	if c.Only != nil && !c.Only(fr) {
		v.spared = true // not even delayed
		return v
	}
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

// harm applies v to fr, which was not dropped: it marks CE in place,
// and returns a held copy of fr, corrupted if v says so, when fr is to
// be corrupted, delayed or reordered. It returns nil when fr goes on as
// it is, or when MaxHeld frames are held already (fr then goes on
// unharmed, marking aside).
func (f *Link) harm(fr []byte, v verdict) *heldFrame {
	if v.ce {
		f.markCE(fr)
	}
	if v.spared || !v.corrupt && f.cfg.Delay <= 0 && !v.reorder {
		return nil
	}
	h := f.get(fr)
	if h == nil {
		f.unharmed.Add(1)
		return nil
	}
	if v.corrupt {
		f.corrupt(h.buf)
		f.corrupted.Add(1)
	}
	return h
}

// hold keeps h in d for the delay or, if v reorders it, until one to
// three more frames have passed or the reorder hold ran out. It reports
// whether it kept h.
func (f *Link) hold(d *direction, h *heldFrame, v verdict, now link.Time) bool {
	switch {
	case f.cfg.Delay > 0:
		h.due = now + f.cfg.Delay
		d.delay.Push(h)
		f.delayed.Add(1)
		return true
	case v.reorder:
		h.due = now + f.cfg.ReorderHold
		h.after = d.passed + 1 + uint64(f.rng.IntN(3))
		d.reorder = append(d.reorder, h)
		f.reordered.Add(1)
		return true
	}
	return false
}

// ready moves up to limit reordered frames that may go on (enough
// frames passed them, or with byTime their hold ran out) from d to the
// end of out, in the order they were held.
func (d *direction) ready(out []*heldFrame, limit int, now link.Time, byTime bool) []*heldFrame {
	k, taken := 0, 0
	for _, h := range d.reorder {
		if taken < limit && (d.passed >= h.after || (byTime && h.due <= now)) {
			out = append(out, h)
			taken++
			continue
		}
		d.reorder[k] = h
		k++
	}
	clear(d.reorder[k:])
	d.reorder = d.reorder[:k]
	return out
}

// due lowers t to the earliest due time of the frames d holds.
func (d *direction) due(t link.Time, ok bool) (link.Time, bool) {
	min := func(x link.Time) {
		if !ok || x < t {
			t, ok = x, true
		}
	}
	if d.delay.Len() > 0 {
		min(d.delay.Peek().due)
	}
	for _, h := range d.reorder {
		min(h.due)
	}
	return t, ok
}

// Receive implements link.Link.
func (f *Link) Receive(frames [][]byte) int {
	now := f.clock.Now()
	f.flushTx(now)
	if f.cfg.Dir&Receive == 0 {
		return f.inner.Receive(frames)
	}
	d := &f.rx
	n := 0
	// Frames whose time has come go first: they were received earlier.
	for n < len(frames) && d.delay.Len() > 0 && d.delay.Peek().due <= now {
		h := d.delay.Pop()
		frames[n] = h.buf
		f.lent = append(f.lent, h)
		n++
	}
	n = f.releaseRx(frames, n, now, true)
	room := len(frames) - n
	if room == 0 {
		return n
	}
	if cap(f.tmp) < room {
		f.tmp = make([][]byte, room)
	}
	tmp := f.tmp[:room]
	m := f.inner.Receive(tmp)
	for _, fr := range tmp[:m] {
		if n == len(frames) {
			break // cannot happen: room was counted
		}
		v := f.draw(fr)
		if v.drop {
			continue
		}
		if h := f.harm(fr, v); h != nil {
			if f.hold(d, h, v, now) {
				continue
			}
			f.lent = append(f.lent, h)
			fr = h.buf
		}
		frames[n] = fr
		n++
		d.passed++
		if v.dup && n < len(frames) {
			frames[n] = fr
			n++
			f.duplicated.Add(1)
			if v.corrupt {
				f.corrupted.Add(1) // a second corrupted frame
			}
		}
		n = f.releaseRx(frames, n, now, false)
	}
	return n
}

// releaseRx moves reordered received frames that may go into frames[n:].
func (f *Link) releaseRx(frames [][]byte, n int, now link.Time, byTime bool) int {
	if len(f.rx.reorder) == 0 {
		return n
	}
	start := len(f.lent)
	f.lent = f.rx.ready(f.lent, len(frames)-n, now, byTime)
	for _, h := range f.lent[start:] {
		frames[n] = h.buf
		n++
	}
	return n
}

// Release implements link.Link.
func (f *Link) Release() {
	f.inner.Release()
	for _, h := range f.lent {
		f.put(h)
	}
	clear(f.lent)
	f.lent = f.lent[:0]
}

// Transmit implements link.Link.
func (f *Link) Transmit(frames [][]byte) int {
	if f.cfg.Dir&Transmit == 0 {
		return f.inner.Transmit(frames)
	}
	now := f.clock.Now()
	if !f.flushTx(now) {
		return 0 // the inner link pushes back
	}
	d := &f.tx
	out, owned := f.out[:0], f.owned[:0]
	for _, fr := range frames {
		v := f.draw(fr)
		if v.drop {
			continue
		}
		h := f.harm(fr, v)
		if h != nil {
			if f.hold(d, h, v, now) {
				if v.dup && f.cfg.Delay > 0 {
					// The duplicate is delayed as long.
					if h2 := f.get(h.buf); h2 != nil {
						h2.due = h.due
						d.delay.Push(h2)
						f.duplicated.Add(1)
						if v.corrupt {
							f.corrupted.Add(1)
						}
					}
				}
				continue
			}
			fr = h.buf
		}
		out = append(out, fr)
		owned = append(owned, h)
		d.passed++
		if v.dup {
			out = append(out, fr)
			owned = append(owned, nil)
			f.duplicated.Add(1)
			if h != nil && v.corrupt {
				f.corrupted.Add(1) // a second corrupted frame
			}
		}
		if len(d.reorder) > 0 {
			start := len(owned)
			owned = d.ready(owned, len(d.reorder), now, false)
			for _, h := range owned[start:] {
				out = append(out, h.buf)
			}
		}
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
		f.backlog.Push(h)
	}
	clear(out)
	clear(owned)
	f.out, f.owned = out[:0], owned[:0]
	return len(frames)
}

// flushTx sends held frames that are due. It reports whether the
// backlog is empty (the inner link takes frames).
func (f *Link) flushTx(now link.Time) bool {
	d := &f.tx
	if f.backlog.Len() == 0 && d.delay.Len() == 0 && len(d.reorder) == 0 {
		return true
	}
	one := &f.one
	for f.backlog.Len() > 0 {
		h := f.backlog.Peek()
		one[0] = h.buf
		if f.inner.Transmit(one[:]) == 0 {
			return false
		}
		f.put(f.backlog.Pop())
	}
	for d.delay.Len() > 0 && d.delay.Peek().due <= now {
		h := d.delay.Peek()
		one[0] = h.buf
		if f.inner.Transmit(one[:]) == 0 {
			return false
		}
		f.put(d.delay.Pop())
		d.passed++
	}
	k := 0
	for _, h := range d.reorder {
		if h.due <= now || d.passed >= h.after {
			one[0] = h.buf
			if f.inner.Transmit(one[:]) == 1 {
				f.put(h)
				continue
			}
		}
		d.reorder[k] = h
		k++
	}
	clear(d.reorder[k:])
	d.reorder = d.reorder[:k]
	return f.backlog.Len() == 0
}

// Due implements link.Dueer: the earliest time a held frame moves on.
func (f *Link) Due() (link.Time, bool) {
	var t link.Time
	ok := f.backlog.Len() > 0 // refused frames go as soon as they can
	t, ok = f.tx.due(t, ok)
	t, ok = f.rx.due(t, ok)
	if d, ok2 := link.Due(f.inner); ok2 && (!ok || d < t) {
		t, ok = d, true
	}
	return t, ok
}

// Poll implements link.Link. It returns by the time a held frame is due.
func (f *Link) Poll(timeout time.Duration) {
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

// Wake implements link.Link.
func (f *Link) Wake() { f.inner.Wake() }

// MTU implements link.Link.
func (f *Link) MTU() int { return f.inner.MTU() }

// Close implements link.Link; it closes the wrapped link and drops held
// frames.
func (f *Link) Close() error { return f.inner.Close() }
