package xdp

import "sync/atomic"

// desc is struct xdp_desc, an entry of the RX and TX rings.
type desc struct {
	addr    uint64
	len     uint32
	options uint32
}

// Flags of desc.options and of the ring flags word.
const (
	pktContd       = 1 // XDP_PKT_CONTD: the frame continues in the next descriptor
	ringNeedWakeup = 1 // XDP_RING_NEED_WAKEUP
)

// ringOffsets locate the parts of a ring in its mapping (struct
// xdp_ring_offset).
type ringOffsets struct {
	producer, consumer, desc, flags uint64
}

// The four rings share two shapes. In a producer ring (fill, TX) user space
// writes entries and advances the producer index; the kernel advances the
// consumer index. In a consumer ring (RX, completion) the roles are
// reversed. Each index is a free-running uint32 shared with the kernel and
// accessed only atomically; the side that owns an index keeps a private copy
// and publishes it with an atomic store after writing (or reading) the
// entries, which orders the entry accesses before the index update as the
// kernel's acquire/release protocol requires. The other side's index is
// re-read only when the cached value does not allow the operation.

// prodRing is the user-space producer side of a ring.
type prodRing[T any] struct {
	producer, consumer, flags *uint32
	entries                   []T
	mask, size                uint32
	prod                      uint32 // our producer index
	limit                     uint32 // cached consumer index + size
}

func (r *prodRing[T]) init(producer, consumer, flags *uint32, entries []T) {
	r.producer, r.consumer, r.flags, r.entries = producer, consumer, flags, entries
	r.size = uint32(len(entries))
	r.mask = r.size - 1
	r.prod = atomic.LoadUint32(producer)
	r.limit = atomic.LoadUint32(consumer) + r.size
}

// free returns how many entries can be produced, re-reading the consumer
// index only when fewer than want are known to be free.
func (r *prodRing[T]) free(want uint32) uint32 {
	n := r.limit - r.prod
	if n < want {
		r.limit = atomic.LoadUint32(r.consumer) + r.size
		n = r.limit - r.prod
	}
	if n > r.size { // a consumer index ahead of ours: trust nothing
		return 0
	}
	return n
}

// slot returns the i-th entry after the ones already produced.
func (r *prodRing[T]) slot(i uint32) *T { return &r.entries[(r.prod+i)&r.mask] }

// submit publishes n entries written through slot.
func (r *prodRing[T]) submit(n uint32) {
	r.prod += n
	atomic.StoreUint32(r.producer, r.prod)
}

// outstanding returns how many produced entries the kernel has not
// consumed yet.
func (r *prodRing[T]) outstanding() uint32 { return r.prod - atomic.LoadUint32(r.consumer) }

func (r *prodRing[T]) needWakeup() bool { return atomic.LoadUint32(r.flags)&ringNeedWakeup != 0 }

// consRing is the user-space consumer side of a ring.
type consRing[T any] struct {
	producer, consumer, flags *uint32
	entries                   []T
	mask, size                uint32
	cons                      uint32 // our consumer index
	limit                     uint32 // cached producer index
}

func (r *consRing[T]) init(producer, consumer, flags *uint32, entries []T) {
	r.producer, r.consumer, r.flags, r.entries = producer, consumer, flags, entries
	r.size = uint32(len(entries))
	r.mask = r.size - 1
	r.cons = atomic.LoadUint32(consumer)
	r.limit = atomic.LoadUint32(producer)
}

// available returns how many entries can be consumed, re-reading the
// producer index only when fewer than want are known to be there.
func (r *consRing[T]) available(want uint32) uint32 {
	n := r.limit - r.cons
	if n < want {
		r.limit = atomic.LoadUint32(r.producer)
		n = r.limit - r.cons
	}
	if n > r.size { // a producer index beyond the ring: trust nothing
		r.limit = r.cons
		return 0
	}
	return n
}

// at returns the i-th entry not yet consumed.
func (r *consRing[T]) at(i uint32) *T { return &r.entries[(r.cons+i)&r.mask] }

// release gives n consumed entries back to the kernel.
func (r *consRing[T]) release(n uint32) {
	r.cons += n
	atomic.StoreUint32(r.consumer, r.cons)
}

func (r *consRing[T]) needWakeup() bool { return atomic.LoadUint32(r.flags)&ringNeedWakeup != 0 }

// The four rings.
type (
	// fillRing hands empty chunks (their UMEM offsets) to the kernel for
	// receiving.
	fillRing struct{ prodRing[uint64] }
	// rxRing brings received frames.
	rxRing struct{ consRing[desc] }
	// txRing takes frames to send.
	txRing struct{ prodRing[desc] }
	// completionRing returns the chunks of sent frames.
	completionRing struct{ consRing[uint64] }
)
