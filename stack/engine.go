package stack

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/spin"
	"github.com/uroce/uroce/link"
	"github.com/uroce/uroce/pfc"
)

// engine runs one link queue and the QPs assigned to it. Everything but
// the kick list and the sleeping flag belongs to the goroutine running
// step (the engine goroutine, or the caller of Device.Step).
type engine struct {
	dev   *Device
	id    int
	link  Link
	clock Clock

	// batchMu is held while a batch is processed; Deregister and
	// Destroy take it to wait for the batch in progress.
	batchMu sync.Mutex

	stash stashPool // buffers the engine's QPs keep requests in (qp.Stash)

	kickMu      sync.Mutex
	kicked      []*QP // QPs with news from verbs calls
	kickPending atomic.Bool
	sleeping    atomic.Bool // in Link.Poll
	in          inbox       // frames other engines received for our QPs

	stop atomic.Bool
	done chan struct{}

	pollers []Poller // batchMu

	// Owned by the engine goroutine.
	rx       [][]byte
	pkt      bth.Packet
	lpkt     bth.Packet // a multicast frame the engine sends (loop)
	steered  bool       // input is of frames from the inbox (in)
	tx       [][]byte   // frames ready to transmit: tx[i] is txBufs[i][:len]
	txBufs   [][]byte
	txN      int
	txLooped int  // tx[:txLooped] went through loop (frames the link refused before)
	txFull   bool // the link refused frames: wait for Poll
	frameMax int
	cur      *QP   // the QP whose lock is held
	spare    []*QP // swapped with kicked
	active   []*QP // QPs that have packets to send
	timers   timerHeap
	due      []*QP
	publish  []*CQ        // CQs with a sink pushed to in this batch
	bounce   []byte       // bytes of backed regions (backing.go), allocated on first use
	owed     pendingWrite // the write-back of bounce owed, if any
	c        engineCounters
	pub      engineCountersAtomic
	pubLast  engineCounters // what pub holds
	now      Time           // the time of the step under way
	pause    pfc.Pauser     // the link partner's PAUSE and PFC (pause.go)
	pausing  bool           // a pause may be in force
	pauseMu  sync.Mutex     // guards pauseCtr
	pauseCtr pfc.Counters   // pause's counters, for Device.PauseCounters
}

// engineCounters are the device counters one engine keeps.
type engineCounters struct {
	rcvdPkts, sentPkts, rcvICRCErr, rcvMalformed, rcvNotRoCE, rcvUnsupported uint64
	rcvNotOurs, rcvUnknownQPN, rcvAddrErr, txEncodeErr                       uint64
	rcvSteered, rcvSteerDrop, backingErr, loopback                           uint64
}

type engineCountersAtomic struct {
	rcvdPkts, sentPkts, rcvICRCErr, rcvMalformed, rcvNotRoCE, rcvUnsupported atomic.Uint64
	rcvNotOurs, rcvUnknownQPN, rcvAddrErr, txEncodeErr                       atomic.Uint64
	rcvSteered, rcvSteerDrop, backingErr, loopback                           atomic.Uint64
}

// publish stores c when it changed since the last call (last, the
// engine's own copy of what was stored): an atomic store is a locked
// instruction on amd64, and most steps change nothing.
func (p *engineCountersAtomic) publish(c, last *engineCounters) {
	if *c == *last {
		return
	}
	*last = *c
	p.rcvdPkts.Store(c.rcvdPkts)
	p.sentPkts.Store(c.sentPkts)
	p.rcvICRCErr.Store(c.rcvICRCErr)
	p.rcvMalformed.Store(c.rcvMalformed)
	p.rcvNotRoCE.Store(c.rcvNotRoCE)
	p.rcvUnsupported.Store(c.rcvUnsupported)
	p.rcvNotOurs.Store(c.rcvNotOurs)
	p.rcvUnknownQPN.Store(c.rcvUnknownQPN)
	p.rcvAddrErr.Store(c.rcvAddrErr)
	p.txEncodeErr.Store(c.txEncodeErr)
	p.rcvSteered.Store(c.rcvSteered)
	p.rcvSteerDrop.Store(c.rcvSteerDrop)
	p.backingErr.Store(c.backingErr)
	p.loopback.Store(c.loopback)
}

func newEngine(d *Device, id int, l Link) *engine {
	e := &engine{dev: d, id: id, link: l, clock: d.clock, done: make(chan struct{})}
	n := d.cfg.Batch
	e.frameMax = link.MaxFrameLen(d.cfg.MTU)
	e.stash.size, e.stash.max = e.frameMax, stashFrames
	e.rx = make([][]byte, n)
	e.tx = make([][]byte, n)
	e.txBufs = make([][]byte, n)
	for i := range e.txBufs {
		e.txBufs[i] = make([]byte, e.frameMax)
	}
	return e
}

// run is the engine goroutine: steps while there is work, then sleeps in
// Link.Poll until a frame, a wake-up from a verbs call, or the next timer.
func (e *engine) run() {
	defer close(e.done)
	idle := 0
	var lastWork time.Time
	for !e.stop.Load() {
		e.batchMu.Lock()
		work := e.step()
		e.publishNow()
		e.batchMu.Unlock()
		if work {
			idle = 0
			lastWork = time.Time{}
			continue
		}
		idle++
		if e.dev.cfg.BusyPoll {
			e.relax(idle)
			continue
		}
		// Polling a while before sleeping catches the next frame or
		// post without the cost of parking and waking: in a stream of
		// requests and ACKs, the gaps are shorter than idleSpin.
		if idle <= idleYields {
			e.relax(idle)
			continue
		}
		if d := e.idleSpin(); d > 0 {
			if lastWork.IsZero() {
				lastWork = time.Now()
			}
			if time.Since(lastWork) < d {
				e.relax(idle)
				continue
			}
		}
		idle = 0
		lastWork = time.Time{}
		e.sleeping.Store(true)
		if e.kickPending.Load() || e.in.pending.Load() || e.stop.Load() {
			e.sleeping.Store(false)
			continue
		}
		if e.arm() {
			e.sleeping.Store(false)
			e.disarm()
			continue
		}
		e.link.Poll(e.timeout())
		e.sleeping.Store(false)
		e.disarm()
	}
}

// relax gives the CPU up on turn n of an idle engine's polling. First
// it lets the link do what it does without sleeping (Poll(0): an AF_XDP
// link kicks what a busy device left on its TX ring, and busy-polls
// the queue when asked to). An
// engine whose work comes from other processes (Config.IdleSpin set: the
// daemon's, whose clients post from theirs) gives it to other threads,
// the clients' among them (spin.Relax); one whose work comes from its
// own process's goroutines gives it to them, which is cheaper.
func (e *engine) relax(n int) {
	e.link.Poll(0)
	if e.dev.cfg.IdleSpin > 0 {
		spin.Relax(n)
	} else {
		runtime.Gosched()
	}
}

// idleSpin returns how long an idle engine polls before it sleeps.
func (e *engine) idleSpin() time.Duration {
	if d := e.dev.cfg.IdleSpin; d != 0 {
		return max(d, 0)
	}
	return idleSpin
}

// shutdown stops the engine goroutine and waits for it.
func (e *engine) shutdown(running bool) {
	e.stop.Store(true)
	if running {
		e.link.Wake()
		<-e.done
	}
}

// timeout returns how long the engine may sleep.
func (e *engine) timeout() time.Duration {
	t, ok := e.nextDeadline()
	busy := len(e.active) > 0 && !e.txFull // a QP said it was busy but sent nothing (or is paused)
	if !ok {
		if busy {
			return time.Millisecond
		}
		return -1
	}
	d := t - e.clock.Now()
	if d < 0 {
		d = 0
	}
	if busy {
		d = min(d, time.Millisecond)
	}
	return d
}

func (e *engine) nextDeadline() (Time, bool) {
	var t Time
	ok := false
	if e.timers.len() > 0 {
		t, ok = e.timers.min().deadline, true
	}
	if d, k := link.Due(e.link); k && (!ok || d < t) {
		t, ok = d, true
	}
	if e.pausing {
		if d, k := e.pause.Deadline(); k && (!ok || d < t) {
			t, ok = d, true
		}
	}
	return t, ok
}

// step runs one batch and reports whether anything happened.
func (e *engine) step() bool {
	now := e.clock.Now()
	e.now = now
	e.settlePause(now)
	work := false
	sent0 := e.c.sentPkts

	// The pollers' work requests kick their QPs: they go out below.
	if len(e.pollers) > 0 && e.poll() {
		work = true
	}

	if e.kickPending.Load() {
		e.kickMu.Lock()
		list := e.kicked
		e.kicked = e.spare[:0]
		e.kickPending.Store(false)
		for _, q := range list {
			q.kicked.Store(false)
		}
		e.kickMu.Unlock()
		for _, q := range list {
			e.acquire(q)
			e.releaseCur()
		}
		clear(list)
		e.spare = list[:0]
		work = true
	}

	if e.in.pending.Load() {
		work = true
		frames := e.in.take()
		e.steered = true
		for _, f := range frames {
			e.input(f, now)
			e.flushIfFull()
		}
		e.steered = false
		e.releaseCur()
		e.in.recycle(frames)
	}

	if n := e.link.Receive(e.rx); n > 0 {
		work = true
		frames, bytes := 0, 0
		for i, f := range e.rx[:n] {
			e.input(f, now)
			e.flushIfFull()
			frames++
			bytes += len(f)
			if (frames >= respFlushFrames || bytes >= respFlushBytes) && i+1 < n && !e.txFull {
				// ACKs go out while the rest of the batch is processed:
				// a requester waiting for them to open its send window
				// works meanwhile, instead of the two taking turns.
				if q := e.cur; q != nil && !q.destroyed {
					q.q.SendResponses(now)
				}
				e.releaseCur()
				if e.txN > 0 {
					e.flush()
				}
				frames, bytes = 0, 0
			}
		}
		e.releaseCur()
		clear(e.rx[:n])
		e.link.Release()
	}

	// Timers: collect first, so a QP that re-arms at once waits for the
	// next step.
	for e.timers.len() > 0 && e.timers.min().deadline <= now {
		q := e.timers.pop()
		e.due = append(e.due, q)
	}
	if len(e.due) > 0 {
		work = true
		for _, q := range e.due {
			e.acquire(q)
			if !q.destroyed {
				q.q.Tick(now)
			}
			e.releaseCur()
		}
		clear(e.due)
		e.due = e.due[:0]
	}

	if e.txFull && e.txN > 0 {
		e.flush()
	}
	if !e.txFull && len(e.active) > 0 {
		k := 0
		for i, q := range e.active {
			if e.txFull {
				// Out of buffers: the rest stay for the next step.
				k += copy(e.active[k:], e.active[i:])
				break
			}
			// A QP that fills the batch is pumped again once the batch
			// is out, as long as the link takes it.
			for {
				e.acquire(q)
				if !q.destroyed && !e.paused(q) { // a paused QP stays busy: it waits
					q.q.Pump(now)
				}
				e.releaseCur()
				if !q.busy || e.txN < len(e.txBufs) || !e.flush() {
					break
				}
			}
			if q.busy {
				e.active[k] = q
				k++
			} else {
				q.active = false
			}
		}
		clear(e.active[k:])
		e.active = e.active[:k]
	}
	if e.txN > 0 {
		e.flush()
	}
	if e.c.sentPkts != sent0 {
		work = true
	}
	e.pub.publish(&e.c, &e.pubLast)
	return work
}

// publishLater notes that c's sink must publish after the batch.
func (e *engine) publishLater(c *CQ) {
	for _, p := range e.publish {
		if p == c {
			return
		}
	}
	e.publish = append(e.publish, c)
}

// publishNow publishes the completions the batch pushed to CQ sinks.
func (e *engine) publishNow() {
	for _, c := range e.publish {
		c.sink.Publish()
	}
	clear(e.publish)
	e.publish = e.publish[:0]
}

// acquire locks q for the engine.
func (e *engine) acquire(q *QP) {
	q.lock()
	q.inEngine = true
	e.cur = q
}

// releaseCur updates the engine's view of the current QP (timer, send
// list) and unlocks it, after the write-back of a backed region the QP
// wrote to.
func (e *engine) releaseCur() {
	q := e.cur
	if q == nil {
		return
	}
	e.cur = nil
	q.inEngine = false
	var d Time
	armed, busy := false, false
	if !q.destroyed {
		d, armed = q.q.Deadline()
		busy = q.q.Busy()
	}
	owner := q.eng.Load() == e
	moved := false
	if owner && q.moveTo != nil && !q.destroyed && !q.active {
		// Handed over (QP.placeAtRTR), out of this engine's timers
		// before the new one can see it; that one takes it from a
		// kick, timer and all.
		if q.heapIdx >= 0 {
			e.timers.remove(q.heapIdx)
		}
		q.eng.Store(q.moveTo)
		q.moveTo, moved = nil, true
	}
	q.unlock()
	e.writeBack()
	if moved || !owner {
		// Moved, or owned by another engine and kicked here before it
		// moved: the news go to its owner.
		q.kick()
		return
	}
	switch {
	case armed && q.heapIdx < 0:
		q.deadline = d
		e.timers.push(q)
	case armed && d != q.deadline:
		q.deadline = d
		e.timers.fix(q.heapIdx)
	case !armed && q.heapIdx >= 0:
		e.timers.remove(q.heapIdx)
	}
	q.busy = busy
	if busy && !q.active {
		q.active = true
		e.active = append(e.active, q)
	}
}

// steer hands a copy of frame f to engine o, the owner of its QP.
func (e *engine) steer(o *engine, f []byte) {
	e.c.rcvSteered++
	if !o.in.put(f) {
		e.c.rcvSteerDrop++
		return
	}
	if o.sleeping.Load() {
		e.releaseCur() // no system call with a QP's lock held
		o.link.Wake()
	}
}

// input handles one received frame.
func (e *engine) input(f []byte, now Time) {
	p := &e.pkt
	if err := bth.Parse(f, p); err != nil {
		switch {
		case err == bth.ErrNotRoCE:
			if !e.macControl(f, now) {
				e.c.rcvNotRoCE++
			}
		case p.Info != nil && p.End <= len(f) && p.End >= p.BTHOff+bth.BTHLen+bth.ICRCLen && !p.ICRCOK():
			e.c.rcvICRCErr++
		default:
			e.c.rcvMalformed++
		}
		return
	}
	if !p.ICRCOK() {
		e.c.rcvICRCErr++
		return
	}
	if p.Version != 2 {
		e.c.rcvUnsupported++
		return
	}
	d := e.dev
	tr := p.Opcode().Transport()
	if f[0]&1 != 0 && tr == bth.TransportUD && p.BTH().DestQP() == MulticastQPN {
		e.inputMcast(f, now)
		return
	}
	if [6]byte(f[0:6]) != d.mac || !d.ours(p) {
		e.c.rcvNotOurs++
		return
	}
	if tr != bth.TransportRC && tr != bth.TransportUC && tr != bth.TransportUD && tr != bth.TransportCNP {
		e.c.rcvUnsupported++
		return
	}
	q := d.qps.lookup(p.BTH().DestQP())
	if q == nil || !q.ready.Load() {
		e.c.rcvUnknownQPN++
		return
	}
	if owner := q.eng.Load(); owner != e {
		// The NIC steered the frame to another queue than the QP's.
		e.steer(owner, f)
		return
	}
	if e.cur != q {
		e.releaseCur()
		e.acquire(q)
	}
	if q.destroyed {
		return
	}
	if q.init.Type != UD && q.peer.IsValid() && tr != bth.TransportCNP {
		// rdma_rxe's check_addr: a connected QP takes packets from its
		// peer to its own address only.
		if p.SrcIP() != q.peer || p.DstIP() != q.local {
			e.c.rcvAddrErr++
			return
		}
	}
	if !q.q.Receive(now, p) {
		e.c.rcvUnsupported++ // not of the QP's transport
		return
	}
	e.c.rcvdPkts++
}

// ours reports whether the packet's destination IP is one of ours.
func (d *Device) ours(p *bth.Packet) bool {
	f := p.Frame
	if p.IPv6 {
		dst := [16]byte(f[p.L3+24 : p.L3+40])
		for _, a := range d.v6 {
			if a == dst {
				return true
			}
		}
		return false
	}
	dst := [4]byte(f[p.L3+16 : p.L3+20])
	for _, a := range d.v4 {
		if a == dst {
			return true
		}
	}
	return false
}

// send encodes one packet of q into the transmit batch (qp.Output of
// the engine's QPs). A full batch refuses the packet, which the QP keeps
// (it stays busy): the engine transmits the batch once it has let go of
// the QP's lock (flushIfFull, the Pump loop), so that no system call
// is made with a QP's lock held. ACKs are coalesced by the QPs
// themselves (qp.Caps.BatchAcks).
func (e *engine) send(q *QP, h *bth.Headers, payload []byte) bool {
	if e.paused(q) {
		return false // sent again when the pause ends
	}
	if e.txN == len(e.txBufs) {
		return false
	}
	buf := e.txBufs[e.txN]
	n, err := bth.Encode(buf, h, payload)
	if err != nil {
		e.c.txEncodeErr++
		return true // a packet that cannot be built is dropped, not retried
	}
	e.tx[e.txN] = buf[:n]
	e.txN++
	return true
}

// flushIfFull transmits a full batch, after letting go of the current
// QP, whose packets the full batch refused.
func (e *engine) flushIfFull() {
	if e.txN == len(e.txBufs) && !e.txFull {
		e.releaseCur()
		e.flush()
	}
}

// flush transmits the batch and reports whether the link took all of it.
func (e *engine) flush() bool {
	e.writeBack() // what the frames acknowledge is in place first
	e.loop()
	sent := e.link.Transmit(e.tx[:e.txN])
	e.c.sentPkts += uint64(sent)
	rem := e.txN - sent
	e.txLooped = rem // what is left was looked at
	if rem == 0 {
		e.txN = 0
		e.txFull = false
		return true
	}
	// Move the unsent frames, buffers and all, to the front.
	for i := 0; i < rem; i++ {
		e.tx[i], e.tx[sent+i] = e.tx[sent+i], e.tx[i]
		e.txBufs[i], e.txBufs[sent+i] = e.txBufs[sent+i], e.txBufs[i]
	}
	e.txN = rem
	e.txFull = true
	return false
}

// loop takes the frames the device sends to itself (its own Ethernet
// address: a QP of it talking to another, or to itself) out of the
// batch and into the engine's inbox, from where input delivers them, or
// steers them to the QP's engine, at the next step: the device's own
// loopback, as rdma_rxe's, since no link brings them back. A UD datagram
// to a multicast group that QPs of the device are attached to goes out
// and, copied, to the inbox of each engine that owns such a QP, as IP
// multicast loops back to the sending host. Frames an inbox has no room
// for are dropped (rcv_steer_drop), as on a congested link. Frames the
// link refused, which stay at the front of the batch, are not looked at
// again: a multicast datagram is copied once.
func (e *engine) loop() {
	d := e.dev
	mc := d.mcast.any()
	k := e.txLooped // frames the link refused before were looked at then
	for i := k; i < e.txN; i++ {
		f := e.tx[i]
		if [6]byte(f[0:6]) == d.mac {
			e.c.sentPkts++
			e.c.loopback++
			if !e.in.put(f) {
				e.c.rcvSteerDrop++
			}
			continue
		}
		if mc && f[0]&1 != 0 {
			e.loopMcast(f)
		}
		if k != i {
			e.tx[k], e.tx[i] = e.tx[i], e.tx[k]
			e.txBufs[k], e.txBufs[i] = e.txBufs[i], e.txBufs[k]
		}
		k++
	}
	e.txN, e.txLooped = k, k
}

// loopMcast copies f, when it is a UD datagram to a group with QPs of
// the device attached, to the inboxes of the engines that own them.
func (e *engine) loopMcast(f []byte) {
	p := &e.lpkt
	if bth.Parse(f, p) != nil || p.Opcode().Transport() != bth.TransportUD || p.BTH().DestQP() != MulticastQPN {
		return
	}
	g := e.dev.mcast.lookup(p.DstIP().As16())
	if g == nil {
		return
	}
	for _, o := range e.dev.engines {
		if !slices.ContainsFunc(g.qps, func(q *QP) bool { return q.eng.Load() == o }) {
			continue
		}
		e.c.loopback++
		if !o.in.put(f) {
			e.c.rcvSteerDrop++
			continue
		}
		if o != e && o.sleeping.Load() {
			o.link.Wake()
		}
	}
}

// timerHeap is a min-heap of QPs by deadline; each QP knows its index.
type timerHeap struct{ h []*QP }

func (t *timerHeap) len() int { return len(t.h) }
func (t *timerHeap) min() *QP { return t.h[0] }

func (t *timerHeap) push(q *QP) {
	q.heapIdx = len(t.h)
	t.h = append(t.h, q)
	t.up(q.heapIdx)
}

func (t *timerHeap) pop() *QP {
	q := t.h[0]
	t.remove(0)
	return q
}

func (t *timerHeap) remove(i int) {
	q := t.h[i]
	last := len(t.h) - 1
	if i != last {
		t.swap(i, last)
	}
	t.h[last] = nil
	t.h = t.h[:last]
	if i != last {
		t.fix(i)
	}
	q.heapIdx = -1
}

func (t *timerHeap) fix(i int) {
	if !t.down(i) {
		t.up(i)
	}
}

func (t *timerHeap) swap(i, j int) {
	t.h[i], t.h[j] = t.h[j], t.h[i]
	t.h[i].heapIdx = i
	t.h[j].heapIdx = j
}

func (t *timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.h[p].deadline <= t.h[i].deadline {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *timerHeap) down(i int) bool {
	start := i
	n := len(t.h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && t.h[r].deadline < t.h[l].deadline {
			m = r
		}
		if t.h[i].deadline <= t.h[m].deadline {
			break
		}
		t.swap(i, m)
		i = m
	}
	return i > start
}

// inbox passes frames between the engines of one device, for multi-queue
// links whose NIC steers a QP's packets to another queue than its own.
type inbox struct {
	mu      sync.Mutex
	frames  [][]byte
	spare   [][]byte
	free    [][]byte
	n       int // buffers allocated
	pending atomic.Bool
}

// maxInbox bounds the frames waiting in one inbox.
const maxInbox = 4096

// put copies f into the inbox; false means the inbox is full.
func (b *inbox) put(f []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var buf []byte
	switch {
	case len(b.free) > 0:
		buf = b.free[len(b.free)-1]
		b.free = b.free[:len(b.free)-1]
	case b.n < maxInbox:
		b.n++
	default:
		return false
	}
	b.frames = append(b.frames, append(buf[:0], f...))
	b.pending.Store(true)
	return true
}

// take returns the waiting frames; recycle must follow.
func (b *inbox) take() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.frames
	b.frames = b.spare[:0]
	b.spare = nil
	b.pending.Store(false)
	return f
}

func (b *inbox) recycle(frames [][]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free = append(b.free, frames...)
	clear(frames)
	b.spare = frames[:0]
}

// An engine transmits the responses to the frames of a receive batch
// every respFlushFrames frames or respFlushBytes bytes received, which
// comes first (a quarter of the default send window of large packets).
const (
	respFlushFrames = 16
	respFlushBytes  = 16 << 10
)

// idleYields is how many times an idle engine yields before it sleeps;
// then it goes on polling until idleSpin has passed without work.
var (
	idleYields = 4
	idleSpin   = 50 * time.Microsecond
)

// stashFrames bounds the frames an engine's QPs keep for requests that
// arrive after a gap (qp.Stash): a few send windows' worth. Buffers are
// allocated when first needed and reused.
const stashFrames = 256

// stashPool lends frame buffers to the responders of an engine's QPs.
// The engine calls it, and so do verbs calls that reset a QP.
type stashPool struct {
	mu   sync.Mutex
	free [][]byte
	n    int // buffers allocated
	size int
	max  int
}

// Get implements qp.Stash.
func (s *stashPool) Get(n int) []byte {
	if n > s.size {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := len(s.free); k > 0 {
		b := s.free[k-1]
		s.free = s.free[:k-1]
		return b
	}
	if s.n >= s.max {
		return nil
	}
	s.n++
	return make([]byte, s.size)
}

// Put implements qp.Stash.
func (s *stashPool) Put(b []byte) {
	s.mu.Lock()
	s.free = append(s.free, b[:cap(b)])
	s.mu.Unlock()
}
