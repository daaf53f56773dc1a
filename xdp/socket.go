package xdp

import "errors"

// waker makes the system calls that wake the kernel's side of the rings.
// On Linux they are sendto and recvfrom on the socket; tests substitute a
// simulated kernel. Errors that only mean "try again later" (EAGAIN, EBUSY,
// ENOBUFS, ENETDOWN, EINTR) are reported as nil.
type waker interface {
	wakeTX() error
	wakeRX() error
}

// Socket is an AF_XDP socket with its own UMEM, bound to one queue of one
// interface.
//
// A Socket belongs to one goroutine: Receive, Release, Transmit, Complete,
// Wait, Stats and Close must not be called concurrently. FD may be called
// from anywhere.
type Socket struct {
	cfg       Config
	umem      []byte
	chunkMask uint64

	fill fillRing
	rx   rxRing
	tx   txRing
	comp completionRing

	// free holds the UMEM offsets of the transmit chunks not in flight;
	// held those of the chunks behind the frames of the last Receive.
	free []uint64
	held []uint64
	// scratch receives multi-descriptor frames, assembled.
	scratch     []byte
	scratchUsed int

	wake     waker
	zeroCopy bool
	closed   bool
	err      error // sticky error from a wake-up
	sys      sysSocket
	st       Stats
}

// newSocket sets a socket up over its UMEM and ring memory, puts its receive
// chunks on the fill ring and its transmit chunks on the free list.
func newSocket(cfg Config, umem []byte, rings *ringMems, wake waker) (*Socket, error) {
	s := &Socket{cfg: cfg, umem: umem, chunkMask: ChunkSize - 1, wake: wake}
	n := uint32(cfg.RingSize)
	p, c, f, e, err := ringViews[uint64](rings.fill, rings.fillOff, n)
	if err != nil {
		return nil, err
	}
	s.fill.init(p, c, f, e)
	p, c, f, d, err := ringViews[desc](rings.rx, rings.rxOff, n)
	if err != nil {
		return nil, err
	}
	s.rx.init(p, c, f, d)
	if p, c, f, d, err = ringViews[desc](rings.tx, rings.txOff, n); err != nil {
		return nil, err
	}
	s.tx.init(p, c, f, d)
	if p, c, f, e, err = ringViews[uint64](rings.comp, rings.compOff, n); err != nil {
		return nil, err
	}
	s.comp.init(p, c, f, e)

	if len(umem) < cfg.Frames*ChunkSize {
		return nil, errors.New("UMEM smaller than its frames")
	}
	rx := cfg.rxChunks()
	s.held = make([]uint64, 0, cfg.Frames)
	s.free = make([]uint64, 0, cfg.Frames)
	for i := cfg.Frames - 1; i >= rx; i-- {
		s.free = append(s.free, uint64(i)*ChunkSize)
	}
	if s.fill.free(uint32(rx)) < uint32(rx) {
		return nil, errors.New("fill ring has no room for the receive chunks")
	}
	for i := 0; i < rx; i++ {
		*s.fill.slot(uint32(i)) = uint64(i) * ChunkSize
	}
	s.fill.submit(uint32(rx))
	if cfg.MultiBuffer {
		s.scratch = make([]byte, 1<<20)
	}
	return s, nil
}

// ringMems are the memory and layouts of the four rings.
type ringMems struct {
	fill, rx, tx, comp             []byte
	fillOff, rxOff, txOff, compOff ringOffsets
}

// Receive fills frames with the frames that have arrived, without
// blocking, and returns how many it filled. Frames that fit one chunk are
// views into the UMEM (no copy); frames that arrived as several descriptors
// (MultiBuffer) are assembled into a per-socket buffer. The views stay valid
// until Release or the next Receive, which releases the previous batch
// first. Receive does not allocate.
func (s *Socket) Receive(frames [][]byte) int {
	if s.closed || len(frames) == 0 {
		return 0
	}
	if len(s.held) > 0 || s.scratchUsed > 0 {
		s.Release()
	}
	avail := s.rx.available(uint32(len(frames)))
	if avail == 0 {
		if s.cfg.NeedWakeup && s.fill.needWakeup() {
			s.wakeup(s.wake.wakeRX())
		}
		return 0
	}
	raceSync()
	var i uint32
	k := 0
	for i < avail && k < len(frames) {
		d := *s.rx.at(i)
		if d.options&pktContd == 0 {
			i++
			s.hold(d.addr)
			v, ok := s.view(d)
			if !ok {
				s.st.RxBad++
				continue
			}
			frames[k] = v
			k++
			s.st.RxFrames++
			s.st.RxBytes += uint64(d.len)
			continue
		}
		// A frame in several descriptors: find its last one.
		j, total, complete := i, 0, false
		for j < avail {
			dj := s.rx.at(j)
			total += int(dj.len)
			j++
			if dj.options&pktContd == 0 {
				complete = true
				break
			}
		}
		if !complete {
			break // the rest is not there yet
		}
		if total > len(s.scratch)-s.scratchUsed && s.scratchUsed > 0 {
			break // no room left in this batch
		}
		ok := total <= len(s.scratch)-s.scratchUsed
		start := s.scratchUsed
		for ; i < j; i++ {
			dj := *s.rx.at(i)
			s.hold(dj.addr)
			v, vok := s.view(dj)
			ok = ok && vok
			if ok {
				s.scratchUsed += copy(s.scratch[s.scratchUsed:], v)
			}
		}
		if !ok {
			s.scratchUsed = start
			s.st.RxBad++
			continue
		}
		frames[k] = s.scratch[start:s.scratchUsed:s.scratchUsed]
		k++
		s.st.RxFrames++
		s.st.RxMultiBuffer++
		s.st.RxBytes += uint64(total)
	}
	s.rx.release(i)
	return k
}

// view returns the UMEM bytes of a received descriptor, if it is valid.
func (s *Socket) view(d desc) ([]byte, bool) {
	end := d.addr + uint64(d.len)
	if end > uint64(len(s.umem)) || end < d.addr || (d.addr&s.chunkMask)+uint64(d.len) > ChunkSize {
		return nil, false
	}
	return s.umem[d.addr:end:end], true
}

// hold records the chunk of a received descriptor for Release.
func (s *Socket) hold(addr uint64) {
	base := addr &^ s.chunkMask
	if base < uint64(len(s.umem)) && len(s.held) < cap(s.held) {
		s.held = append(s.held, base)
	}
}

// Release gives the chunks behind the frames of the last Receive back to
// the kernel's fill ring. The frames must not be used afterwards.
func (s *Socket) Release() {
	s.scratchUsed = 0
	n := uint32(len(s.held))
	if s.closed || n == 0 {
		return
	}
	m := min(n, s.fill.free(n))
	for i, a := range s.held[:m] {
		*s.fill.slot(uint32(i)) = a
	}
	s.fill.submit(m)
	// The fill ring holds every receive chunk, so m == n; should the
	// kernel hold on to entries, the rest waits for the next Release.
	s.held = s.held[:copy(s.held, s.held[m:])]
}

// Transmit copies frames, in order, into free chunks and puts them on the TX
// ring, waking the kernel if it needs it. It returns how many frames it took
// from the front of frames; it stops early when chunks or TX ring slots run
// out (Complete, or a later Transmit, frees them). A frame larger than a
// chunk goes out as a chain of descriptors when the socket was opened with
// MultiBuffer. Frames that can never be sent (empty, or too large) are
// skipped, counted as taken and in Stats.TxRejected. Transmit does not
// allocate.
func (s *Socket) Transmit(frames [][]byte) int {
	if s.closed || len(frames) == 0 {
		return 0
	}
	raceSync()
	s.reap()
	var descs uint32
	room := s.tx.free(uint32(len(frames)))
	taken := 0
	for _, f := range frames {
		need := (len(f) + ChunkSize - 1) / ChunkSize
		if need == 0 || need > maxFrags || (need > 1 && !s.cfg.MultiBuffer) {
			s.st.TxRejected++
			taken++
			continue
		}
		if need > len(s.free) {
			s.reap()
			if need > len(s.free) {
				break
			}
		}
		if descs+uint32(need) > room {
			room = s.tx.free(descs + uint32(need))
			if descs+uint32(need) > room {
				break
			}
		}
		for off := 0; off < len(f); {
			addr := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			c := copy(s.umem[addr:addr+ChunkSize], f[off:])
			off += c
			d := s.tx.slot(descs)
			d.addr, d.len, d.options = addr, uint32(c), 0
			if off < len(f) {
				d.options = pktContd
			}
			descs++
		}
		taken++
		s.st.TxFrames++
		s.st.TxBytes += uint64(len(f))
		if need > 1 {
			s.st.TxMultiBuffer++
		}
	}
	if descs > 0 {
		s.tx.submit(descs)
		s.kickTX()
	}
	return taken
}

// Complete takes the chunks of sent frames back from the completion ring
// and returns how many chunks it reclaimed (one per descriptor: a frame sent
// as several descriptors counts several). If frames are still waiting on the
// TX ring and the kernel needs a wake-up for them, it wakes it.
func (s *Socket) Complete() int {
	if s.closed {
		return 0
	}
	n := s.reap()
	if s.tx.outstanding() > 0 {
		s.kickTX()
	}
	return n
}

// Pending returns the number of transmit chunks in flight: on the TX ring
// or sent and not yet reclaimed by Complete.
func (s *Socket) Pending() int {
	if s.closed {
		return 0
	}
	return s.cfg.Frames - s.cfg.rxChunks() - len(s.free)
}

// reap moves completed chunks to the free list.
func (s *Socket) reap() int {
	n := s.comp.available(s.comp.size)
	for i := uint32(0); i < n; i++ {
		base := *s.comp.at(i) &^ s.chunkMask
		if base < uint64(len(s.umem)) && len(s.free) < cap(s.free) {
			s.free = append(s.free, base)
		} else {
			s.st.RxBad++
		}
	}
	if n > 0 {
		s.comp.release(n)
		s.st.Completed += uint64(n)
	}
	return int(n)
}

// Unsent returns the number of descriptors on the TX ring that the kernel
// has not taken yet. In copy mode, a wake-up sends what is on the ring
// unless the device's queue is full (its driver reports busy, as
// virtio-net does): those frames then stay on the ring and only a later
// wake-up sends them, so whoever waits for events must come back to kick
// again (Complete does) while Unsent is not zero.
func (s *Socket) Unsent() int {
	if s.closed {
		return 0
	}
	return int(s.tx.outstanding())
}

// BusyPoll makes a recvfrom(2) that processes the queue's NAPI context
// when the socket was opened with Config.BusyPoll, so that frames the
// device received reach the RX ring (and frames on the TX ring go out)
// without a softirq. Without Config.BusyPoll it does nothing. It does not
// block or allocate.
func (s *Socket) BusyPoll() {
	if s.closed || s.cfg.BusyPoll <= 0 {
		return
	}
	s.wakeup(s.wake.wakeRX())
}

// kickTX wakes the kernel to send what is on the TX ring, if it needs it.
func (s *Socket) kickTX() {
	if !s.cfg.NeedWakeup || s.tx.needWakeup() {
		s.wakeup(s.wake.wakeTX())
		if !s.zeroCopy && s.tx.outstanding() > 0 {
			s.st.TxBusy++
		}
	}
}

// wakeup counts a wake-up and keeps its error.
func (s *Socket) wakeup(err error) {
	s.st.Wakeups++
	if err != nil {
		s.st.WakeupErrors++
		if s.err == nil {
			s.err = err
		}
	}
}

// ZeroCopy reports whether the socket was bound in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// Config returns the socket's configuration, defaults filled in.
func (s *Socket) Config() Config { return s.cfg }

// counters returns the socket's own counters.
func (s *Socket) counters() Stats { return s.st }
