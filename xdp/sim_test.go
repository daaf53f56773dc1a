package xdp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// The simulated kernel side of a socket, in plain memory. It does its own
// index arithmetic directly on the shared words, as the kernel does, so
// the socket's ring code is checked against an independent implementation.

const simHeadroom = 256 // XDP_PACKET_HEADROOM: where copy mode puts RX data

var simOff = ringOffsets{producer: 0, consumer: 64, flags: 128, desc: 192}

type simRing[T any] struct {
	prod, cons, flags *uint32
	e                 []T
	mask              uint32
}

type simKernel struct {
	t                   testing.TB
	umem                []byte
	mems                ringMems
	fill, comp          simRing[uint64]
	rx, tx              simRing[desc]
	pool                []uint64 // chunks taken from the fill ring
	txWakes, rxWakes    int
	wakeErr             error
	onTXWake            func()
	frameBuf            []byte // reused by consumeTX
	rxChunk             int    // data bytes per RX descriptor
	partialAfterFirstRX bool
}

func newSim(t testing.TB, cfg Config, start uint32) (*simKernel, *Socket) {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	k := &simKernel{t: t, umem: make([]byte, cfg.Frames*ChunkSize), rxChunk: ChunkSize - simHeadroom,
		frameBuf: make([]byte, 0, maxFrags*ChunkSize)}
	n := uint32(cfg.RingSize)
	k.mems = ringMems{
		fill: make([]byte, ringMemSize[uint64](simOff, n)), comp: make([]byte, ringMemSize[uint64](simOff, n)),
		rx: make([]byte, ringMemSize[desc](simOff, n)), tx: make([]byte, ringMemSize[desc](simOff, n)),
		fillOff: simOff, compOff: simOff, rxOff: simOff, txOff: simOff,
	}
	initSim(t, &k.fill, k.mems.fill, n, start)
	initSim(t, &k.comp, k.mems.comp, n, start)
	initSim(t, &k.rx, k.mems.rx, n, start)
	initSim(t, &k.tx, k.mems.tx, n, start)
	k.pool = make([]uint64, 0, cfg.Frames)
	s, err := newSocket(cfg, k.umem, &k.mems, k)
	if err != nil {
		t.Fatal(err)
	}
	return k, s
}

func initSim[T any](t testing.TB, r *simRing[T], mem []byte, n, start uint32) {
	p, c, f, e, err := ringViews[T](mem, simOff, n)
	if err != nil {
		t.Fatal(err)
	}
	*r = simRing[T]{prod: p, cons: c, flags: f, e: e, mask: n - 1}
	atomic.StoreUint32(p, start)
	atomic.StoreUint32(c, start)
}

func (k *simKernel) wakeTX() error {
	k.txWakes++
	if k.onTXWake != nil {
		k.onTXWake()
	}
	return k.wakeErr
}

func (k *simKernel) wakeRX() error { k.rxWakes++; return k.wakeErr }

// takeFill moves every chunk on the fill ring to the pool.
func (k *simKernel) takeFill() {
	c, p := atomic.LoadUint32(k.fill.cons), atomic.LoadUint32(k.fill.prod)
	for ; c != p; c++ {
		k.pool = append(k.pool, k.fill.e[c&k.fill.mask])
	}
	atomic.StoreUint32(k.fill.cons, c)
}

// deliver puts frame on the RX ring as the kernel does in copy mode: in
// descriptors of at most rxChunk bytes at headroom 256 in chunks from the
// fill ring, published at once. It reports false (a drop) when chunks or
// RX slots are missing.
func (k *simKernel) deliver(frame []byte) bool {
	if len(k.pool) == 0 {
		k.takeFill()
	}
	frags := (len(frame) + k.rxChunk - 1) / k.rxChunk
	p, c := atomic.LoadUint32(k.rx.prod), atomic.LoadUint32(k.rx.cons)
	if frags > len(k.pool) || p-c+uint32(frags) > k.rx.mask+1 {
		return false
	}
	for i := 0; i < frags; i++ {
		part := frame[i*k.rxChunk : min(len(frame), (i+1)*k.rxChunk)]
		addr := k.pool[len(k.pool)-1]
		k.pool = k.pool[:len(k.pool)-1]
		copy(k.umem[addr+simHeadroom:], part)
		d := desc{addr: addr + simHeadroom, len: uint32(len(part))}
		if i < frags-1 {
			d.options = pktContd
		}
		k.rx.e[(p+uint32(i))&k.rx.mask] = d
		if k.partialAfterFirstRX && i == 0 && frags > 1 {
			atomic.StoreUint32(k.rx.prod, p+1) // publish mid-frame
			k.partialAfterFirstRX = false
		}
	}
	atomic.StoreUint32(k.rx.prod, p+uint32(frags))
	return true
}

// consumeTX takes every frame off the TX ring, calls got with each
// (assembled from its descriptors; the slice is reused) and completes
// their chunks.
func (k *simKernel) consumeTX(got func([]byte)) (frames int) {
	c, p := atomic.LoadUint32(k.tx.cons), atomic.LoadUint32(k.tx.prod)
	cp := atomic.LoadUint32(k.comp.prod)
	for ; c != p; c++ {
		d := k.tx.e[c&k.tx.mask]
		if d.len == 0 || d.len > ChunkSize || d.addr%ChunkSize+uint64(d.len) > ChunkSize {
			k.t.Fatalf("invalid TX descriptor %+v", d)
		}
		k.frameBuf = append(k.frameBuf, k.umem[d.addr:d.addr+uint64(d.len)]...)
		if cp-atomic.LoadUint32(k.comp.cons) > k.comp.mask {
			k.t.Fatal("completion ring overflow")
		}
		k.comp.e[cp&k.comp.mask] = d.addr
		cp++
		if d.options&pktContd == 0 {
			got(k.frameBuf)
			k.frameBuf = k.frameBuf[:0]
			frames++
		}
	}
	atomic.StoreUint32(k.tx.cons, c)
	atomic.StoreUint32(k.comp.prod, cp)
	return frames
}

func setFlag(f *uint32, on bool) {
	if on {
		atomic.StoreUint32(f, ringNeedWakeup)
	} else {
		atomic.StoreUint32(f, 0)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i/251)
	}
	return b
}

func TestSimReceive(t *testing.T) {
	k, s := newSim(t, Config{Frames: 64, RingSize: 32}, 0)
	want := [][]byte{pattern(60, 1), pattern(1514, 2), pattern(3840, 3)}
	for _, f := range want {
		if !k.deliver(f) {
			t.Fatal("deliver failed")
		}
	}
	batch := make([][]byte, 8)
	if n := s.Receive(batch); n != 3 {
		t.Fatalf("Receive = %d, want 3", n)
	}
	for i, f := range want {
		if !bytes.Equal(batch[i], f) {
			t.Errorf("frame %d differs", i)
		}
		if cap(batch[i]) != len(batch[i]) {
			t.Errorf("frame %d: cap %d > len %d: appending would overwrite the UMEM", i, cap(batch[i]), len(batch[i]))
		}
		// Single-descriptor frames are views into the UMEM.
		batch[i][0] ^= 0xff
	}
	if !bytes.Equal(k.umem[k.rx.e[0].addr:][:1], batch[0][:1]) {
		t.Error("frame 0 is not a view into the UMEM")
	}
	if n := s.Receive(batch); n != 0 {
		t.Fatalf("second Receive = %d, want 0", n)
	}
	// The second Receive released the chunks: back on the fill ring,
	// chunk-aligned.
	k.pool = k.pool[:0]
	k.takeFill()
	if len(k.pool) != 3 {
		t.Fatalf("%d chunks back on the fill ring, want 3", len(k.pool))
	}
	for _, a := range k.pool {
		if a%ChunkSize != 0 {
			t.Errorf("released address %#x not chunk-aligned", a)
		}
	}
	st := s.counters()
	if st.RxFrames != 3 || st.RxBytes != 60+1514+3840 || st.RxMultiBuffer != 0 {
		t.Errorf("counters %+v", st)
	}
}

func TestSimReceiveBatches(t *testing.T) {
	k, s := newSim(t, Config{Frames: 64, RingSize: 32}, 0)
	for i := 0; i < 10; i++ {
		k.deliver(pattern(100, byte(i)))
	}
	batch := make([][]byte, 4)
	var got []int
	for {
		n := s.Receive(batch)
		if n == 0 {
			break
		}
		for _, f := range batch[:n] {
			if !bytes.Equal(f, pattern(100, f[0])) {
				t.Fatal("frame corrupted")
			}
		}
		got = append(got, n)
		s.Release()
	}
	if len(got) != 3 || got[0] != 4 || got[1] != 4 || got[2] != 2 {
		t.Errorf("batches %v, want [4 4 2]", got)
	}
}

func TestSimReceiveMultiBuffer(t *testing.T) {
	k, s := newSim(t, Config{Frames: 64, RingSize: 32, MultiBuffer: true}, 0)
	want := [][]byte{pattern(4170, 1), pattern(64, 2), pattern(9018, 3), pattern(3841, 4)}
	for _, f := range want {
		if !k.deliver(f) {
			t.Fatal("deliver failed")
		}
	}
	// 2 + 1 + 3 + 2 descriptors.
	if p := atomic.LoadUint32(k.rx.prod); p != 8 {
		t.Fatalf("%d RX descriptors, want 8", p)
	}
	batch := make([][]byte, 8)
	n := s.Receive(batch)
	if n != len(want) {
		t.Fatalf("Receive = %d, want %d", n, len(want))
	}
	for i := range want {
		if !bytes.Equal(batch[i], want[i]) {
			t.Errorf("frame %d (%d bytes): got %d bytes, content differs", i, len(want[i]), len(batch[i]))
		}
	}
	st := s.counters()
	if st.RxMultiBuffer != 3 || st.RxFrames != 4 {
		t.Errorf("counters %+v", st)
	}
	s.Release()
	k.pool = k.pool[:0]
	k.takeFill()
	if len(k.pool) != 8 {
		t.Errorf("%d chunks released, want 8", len(k.pool))
	}
}

// A frame whose descriptors are only partly published is left on the ring
// until the rest arrives.
func TestSimReceivePartialFrame(t *testing.T) {
	k, s := newSim(t, Config{Frames: 64, RingSize: 32, MultiBuffer: true}, 0)
	k.deliver(pattern(100, 9))
	p := atomic.LoadUint32(k.rx.prod)
	f := pattern(5000, 1)
	k.partialAfterFirstRX = true
	// Deliver, then pretend the producer index stopped mid-frame.
	k.deliver(f)
	atomic.StoreUint32(k.rx.prod, p+1)
	batch := make([][]byte, 8)
	if n := s.Receive(batch); n != 1 || len(batch[0]) != 100 {
		t.Fatalf("Receive = %d (%d bytes), want the complete 100-byte frame only", n, len(batch[0]))
	}
	if c := atomic.LoadUint32(k.rx.cons); c != p {
		t.Fatalf("consumer %d, want %d: the partial frame was consumed", c, p)
	}
	atomic.StoreUint32(k.rx.prod, p+2)
	if n := s.Receive(batch); n != 1 || !bytes.Equal(batch[0], f) {
		t.Fatalf("Receive = %d, want the 5000-byte frame", n)
	}
}

func TestSimTransmit(t *testing.T) {
	k, s := newSim(t, Config{Frames: 64, RingSize: 32, MultiBuffer: true}, 0)
	want := [][]byte{pattern(60, 1), pattern(4096, 2), pattern(4097, 3), pattern(4170, 4), pattern(9018, 5)}
	if n := s.Transmit(want); n != len(want) {
		t.Fatalf("Transmit = %d", n)
	}
	var descs []desc
	for c := atomic.LoadUint32(k.tx.cons); c != atomic.LoadUint32(k.tx.prod); c++ {
		descs = append(descs, k.tx.e[c&k.tx.mask])
	}
	var chains []int
	run := 0
	for _, d := range descs {
		run++
		if d.options&pktContd == 0 {
			chains = append(chains, run)
			run = 0
		}
	}
	if want := []int{1, 1, 2, 2, 3}; len(chains) != len(want) || chains[2] != 2 || chains[4] != 3 || run != 0 {
		t.Fatalf("descriptor chains %v, want %v", chains, want)
	}
	if s.Pending() != 9 {
		t.Errorf("Pending = %d, want 9", s.Pending())
	}
	var got [][]byte
	k.consumeTX(func(f []byte) { got = append(got, append([]byte(nil), f...)) })
	for i := range want {
		if i >= len(got) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if n := s.Complete(); n != 9 {
		t.Errorf("Complete = %d, want 9", n)
	}
	if s.Pending() != 0 {
		t.Errorf("Pending = %d after Complete", s.Pending())
	}
	st := s.counters()
	if st.TxFrames != 5 || st.TxMultiBuffer != 3 || st.TxBytes != 60+4096+4097+4170+9018 || st.Completed != 9 {
		t.Errorf("counters %+v", st)
	}
}

func TestSimTransmitRejects(t *testing.T) {
	_, s := newSim(t, Config{Frames: 64, RingSize: 32}, 0)
	if n := s.Transmit([][]byte{nil, pattern(4097, 1), pattern(100, 2)}); n != 3 {
		t.Fatalf("Transmit = %d, want 3 (two rejected, one sent)", n)
	}
	_, m := newSim(t, Config{Frames: 64, RingSize: 32, MultiBuffer: true}, 0)
	if n := m.Transmit([][]byte{pattern(maxFrags*ChunkSize+1, 1)}); n != 1 {
		t.Fatalf("Transmit = %d, want 1", n)
	}
	if st := s.counters(); st.TxRejected != 2 || st.TxFrames != 1 {
		t.Errorf("counters %+v", st)
	}
	if st := m.counters(); st.TxRejected != 1 || st.TxFrames != 0 {
		t.Errorf("multi-buffer counters %+v", st)
	}
}

// With few chunks, Transmit stops when they run out and continues once the
// kernel has completed some.
func TestSimTransmitBackpressure(t *testing.T) {
	k, s := newSim(t, Config{Frames: 8, RingSize: 4}, 0)
	frames := make([][]byte, 10)
	for i := range frames {
		frames[i] = pattern(64, byte(i))
	}
	if n := s.Transmit(frames); n != 4 {
		t.Fatalf("Transmit = %d, want 4 (transmit chunks)", n)
	}
	if n := s.Transmit(frames[4:]); n != 0 {
		t.Fatalf("Transmit without completions = %d, want 0", n)
	}
	if n := s.Complete(); n != 0 {
		t.Fatalf("Complete = %d before the kernel sent anything", n)
	}
	var seen []byte
	k.consumeTX(func(f []byte) { seen = append(seen, f[0]) })
	// Transmit reclaims completed chunks itself.
	if n := s.Transmit(frames[4:]); n != 4 {
		t.Fatalf("Transmit after completions = %d, want 4", n)
	}
	k.consumeTX(func(f []byte) { seen = append(seen, f[0]) })
	s.Complete()
	if n := s.Transmit(frames[8:]); n != 2 {
		t.Fatalf("Transmit = %d, want 2", n)
	}
	k.consumeTX(func(f []byte) { seen = append(seen, f[0]) })
	for i, b := range seen {
		if b != frames[i][0] {
			t.Fatalf("frames out of order: %v", seen)
		}
	}
	if len(seen) != 10 {
		t.Fatalf("%d frames sent, want 10", len(seen))
	}
}

func TestSimNeedWakeup(t *testing.T) {
	f := [][]byte{pattern(64, 1)}
	batch := make([][]byte, 4)

	k, s := newSim(t, Config{Frames: 16, RingSize: 8, NeedWakeup: true}, 0)
	s.Transmit(f)
	if k.txWakes != 0 {
		t.Errorf("woke the kernel for TX without the flag")
	}
	setFlag(k.tx.flags, true)
	s.Transmit(f)
	if k.txWakes != 1 {
		t.Errorf("%d TX wake-ups with the flag, want 1", k.txWakes)
	}
	// Frames still on the TX ring: Complete wakes the kernel only while
	// it asks for it.
	s.Complete()
	if k.txWakes != 2 {
		t.Errorf("%d TX wake-ups after Complete, want 2", k.txWakes)
	}
	setFlag(k.tx.flags, false)
	s.Complete()
	if k.txWakes != 2 {
		t.Errorf("Complete woke the kernel without the flag")
	}
	k.consumeTX(func([]byte) {})
	setFlag(k.tx.flags, true)
	s.Complete()
	if k.txWakes != 2 {
		t.Errorf("Complete woke the kernel with nothing outstanding")
	}

	s.Receive(batch)
	if k.rxWakes != 0 {
		t.Errorf("woke the kernel for RX without the flag")
	}
	setFlag(k.fill.flags, true)
	s.Receive(batch)
	if k.rxWakes != 1 {
		t.Errorf("%d RX wake-ups with the flag, want 1", k.rxWakes)
	}
	k.deliver(pattern(64, 1))
	s.Receive(batch)
	if k.rxWakes != 1 {
		t.Errorf("woke the kernel for RX with frames waiting")
	}

	// Without need_wakeup every Transmit wakes the kernel, Receive never.
	k2, s2 := newSim(t, Config{Frames: 16, RingSize: 8}, 0)
	setFlag(k2.fill.flags, true)
	s2.Transmit(f)
	s2.Transmit(f)
	s2.Receive(batch)
	if k2.txWakes != 2 || k2.rxWakes != 0 {
		t.Errorf("without need_wakeup: %d TX, %d RX wake-ups; want 2, 0", k2.txWakes, k2.rxWakes)
	}
}

// A device whose queue is full leaves frames on the TX ring after a
// wake-up: Unsent says how many, TxBusy counts the wake-up, and Complete
// wakes the kernel again until the device takes them.
func TestSimBusyDevice(t *testing.T) {
	k, s := newSim(t, Config{Frames: 32, RingSize: 16, NeedWakeup: true}, 0)
	setFlag(k.tx.flags, true)
	busy := true
	sent := 0
	k.onTXWake = func() {
		if !busy {
			sent += k.consumeTX(func([]byte) {})
		}
	}
	frames := [][]byte{pattern(64, 1), pattern(100, 2), pattern(200, 3)}
	if n := s.Transmit(frames); n != 3 {
		t.Fatalf("Transmit took %d of 3", n)
	}
	if u := s.Unsent(); u != 3 || s.counters().TxBusy != 1 {
		t.Fatalf("after a busy wake-up: Unsent %d, TxBusy %d; want 3, 1", u, s.counters().TxBusy)
	}
	s.Complete()
	if s.counters().TxBusy != 2 || k.txWakes != 2 {
		t.Errorf("Complete on a busy device: TxBusy %d, %d wake-ups; want 2, 2", s.counters().TxBusy, k.txWakes)
	}
	busy = false
	s.Complete()
	if sent != 3 || s.Unsent() != 0 || s.counters().TxBusy != 2 {
		t.Errorf("once the device has room: %d sent, Unsent %d, TxBusy %d; want 3, 0, 2", sent, s.Unsent(), s.counters().TxBusy)
	}
	s.Close()
	if s.Unsent() != 0 {
		t.Error("Unsent of a closed socket")
	}
}

// BusyPoll makes a recvfrom only on a socket opened for busy polling.
func TestSimBusyPoll(t *testing.T) {
	k, s := newSim(t, Config{Frames: 16, RingSize: 8}, 0)
	s.BusyPoll()
	if k.rxWakes != 0 {
		t.Errorf("%d RX wake-ups without Config.BusyPoll", k.rxWakes)
	}
	k2, s2 := newSim(t, Config{Frames: 16, RingSize: 8, BusyPoll: 50 * time.Microsecond}, 0)
	s2.BusyPoll()
	s2.BusyPoll()
	if k2.rxWakes != 2 {
		t.Errorf("%d RX wake-ups with Config.BusyPoll, want 2", k2.rxWakes)
	}
}

func TestSimWakeupError(t *testing.T) {
	k, s := newSim(t, Config{Frames: 16, RingSize: 8}, 0)
	bad := errors.New("no such device")
	k.wakeErr = bad
	s.Transmit([][]byte{pattern(64, 1)})
	if st := s.counters(); st.Wakeups != 1 || st.WakeupErrors != 1 {
		t.Errorf("counters %+v", st)
	}
	if !errors.Is(s.err, bad) {
		t.Errorf("sticky error %v", s.err)
	}
}

// Descriptors a broken kernel could produce are counted, never followed.
func TestSimBadDescriptors(t *testing.T) {
	k, s := newSim(t, Config{Frames: 16, RingSize: 8, MultiBuffer: true}, 0)
	bad := []desc{
		{addr: uint64(len(k.umem)) + 256, len: 64},            // outside the UMEM
		{addr: 3*ChunkSize + 4000, len: 200},                  // crosses a chunk
		{addr: 1<<64 - 8, len: 64},                            // wraps
		{addr: 4*ChunkSize + 256, len: 64, options: pktContd}, // chain into...
		{addr: uint64(len(k.umem)), len: 64},                  // ...a bad one
	}
	for i, d := range bad {
		k.rx.e[i] = d
	}
	atomic.StoreUint32(k.rx.prod, uint32(len(bad)))
	batch := make([][]byte, 8)
	if n := s.Receive(batch); n != 0 {
		t.Fatalf("Receive = %d from bad descriptors", n)
	}
	if st := s.counters(); st.RxBad != 4 {
		t.Errorf("RxBad = %d, want 4", st.RxBad)
	}
	// A producer index far ahead of the ring is not trusted.
	atomic.StoreUint32(k.rx.prod, atomic.LoadUint32(k.rx.cons)+1000)
	if n := s.Receive(batch); n != 0 {
		t.Fatalf("Receive = %d with a corrupt producer index", n)
	}
	// A bogus completion is counted and dropped.
	k.comp.e[0] = 1 << 40
	atomic.StoreUint32(k.comp.prod, 1)
	free := len(s.free)
	s.Complete()
	if len(s.free) != free {
		t.Errorf("a bogus completion entered the free list")
	}
}

func TestSimClosed(t *testing.T) {
	_, s := newSim(t, Config{Frames: 16, RingSize: 8}, 0)
	s.closed = true
	if s.Receive(make([][]byte, 4)) != 0 || s.Transmit([][]byte{pattern(64, 1)}) != 0 || s.Complete() != 0 {
		t.Error("a closed socket moved frames")
	}
	s.Release()
}

// Random traffic both ways over rings whose indices start just below the
// uint32 wrap: every frame arrives intact and in order, and every chunk is
// accounted for at the end.
func TestSimRandomWrap(t *testing.T) {
	for _, mb := range []bool{false, true} {
		k, s := newSim(t, Config{Frames: 64, RingSize: 16, MultiBuffer: mb, NeedWakeup: true}, 1<<32-50)
		setFlag(k.tx.flags, true)
		rng := rand.New(rand.NewPCG(7, uint64(len(k.umem))))
		maxLen := 3840
		if mb {
			maxLen = 9018
		}
		var rxWant, txWant [][]byte
		rxGot, txGot := 0, 0
		batch := make([][]byte, 8)
		seq := byte(0)
		for step := 0; step < 3000; step++ {
			switch rng.IntN(5) {
			case 0: // the wire brings a frame
				f := pattern(1+rng.IntN(maxLen), seq)
				seq++
				if k.deliver(f) {
					rxWant = append(rxWant, f)
				}
			case 1:
				n := s.Receive(batch[:1+rng.IntN(len(batch))])
				for _, f := range batch[:n] {
					if !bytes.Equal(f, rxWant[rxGot]) {
						t.Fatalf("step %d: received frame %d differs", step, rxGot)
					}
					rxGot++
				}
				if rng.IntN(2) == 0 {
					s.Release()
				}
			case 2:
				n := 1 + rng.IntN(4)
				fs := make([][]byte, n)
				for i := range fs {
					fs[i] = pattern(1+rng.IntN(maxLen), seq)
					seq++
				}
				txWant = append(txWant, fs[:s.Transmit(fs)]...)
			case 3:
				k.consumeTX(func(f []byte) {
					if !bytes.Equal(f, txWant[txGot]) {
						t.Fatalf("step %d: sent frame %d differs", step, txGot)
					}
					txGot++
				})
			case 4:
				s.Complete()
			}
		}
		// Drain.
		for n := s.Receive(batch); n > 0; n = s.Receive(batch) {
			for _, f := range batch[:n] {
				if !bytes.Equal(f, rxWant[rxGot]) {
					t.Fatalf("drain: received frame %d differs", rxGot)
				}
				rxGot++
			}
		}
		s.Release()
		k.consumeTX(func([]byte) { txGot++ })
		s.Complete()
		if txGot != len(txWant) {
			t.Fatalf("%d frames sent, want %d", txGot, len(txWant))
		}
		if atomic.LoadUint32(k.rx.prod) > 1<<31 || atomic.LoadUint32(k.tx.prod) > 1<<31 {
			t.Errorf("ring indices did not wrap past zero")
		}
		if rxGot != len(rxWant) {
			t.Errorf("%d frames received, %d delivered", rxGot, len(rxWant))
		}
		k.takeFill()
		seen := map[uint64]bool{}
		for _, a := range append(append([]uint64(nil), k.pool...), s.free...) {
			if a%ChunkSize != 0 || seen[a] {
				t.Fatalf("chunk %#x duplicated or misaligned", a)
			}
			seen[a] = true
		}
		if len(seen) != s.cfg.Frames {
			t.Errorf("%d chunks accounted for, want %d", len(seen), s.cfg.Frames)
		}
		if rxGot < len(rxWant)/2 || txGot == 0 {
			t.Errorf("too little traffic: rx %d/%d, tx %d", rxGot, len(rxWant), txGot)
		}
	}
}

// Receive, Release, Transmit and Complete do not allocate.
func TestSimAllocs(t *testing.T) {
	k, s := newSim(t, Config{Frames: 256, RingSize: 64, MultiBuffer: true}, 0)
	small, big := pattern(64, 1), pattern(4170, 2)
	out := [][]byte{small, big, small, small}
	batch := make([][]byte, 16)
	drop := func([]byte) {}
	step := func() {
		k.deliver(small)
		k.deliver(big)
		if s.Receive(batch) != 2 {
			t.Fatal("Receive")
		}
		s.Release()
		if s.Transmit(out) != len(out) {
			t.Fatal("Transmit")
		}
		k.consumeTX(drop)
		s.Complete()
	}
	step()
	if a := testing.AllocsPerRun(200, step); a != 0 {
		t.Errorf("%v allocations per round", a)
	}
}
