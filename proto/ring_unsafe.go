package proto

import (
	"sync/atomic"
	"unsafe"
)

// Ring is a view of one ring in shared memory. The memory must stay
// mapped while the view is used and be aligned to 64 bytes (a mapping
// is). Both sides use the slot count and size they agreed on at
// creation, never the ones in the header.
type Ring struct {
	mem   []byte
	slots uint32
	size  int
}

// NewRing returns a view of the ring of slots slots (a power of two) of
// size bytes at the start of mem, or false when mem is too small or not
// aligned.
func NewRing(mem []byte, slots, size int) (Ring, bool) {
	if slots <= 0 || slots&(slots-1) != 0 || size <= 0 || len(mem) < RingBytes(slots, size) ||
		uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%64 != 0 {
		return Ring{}, false
	}
	return Ring{mem: mem[:RingBytes(slots, size)], slots: uint32(slots), size: size}, true
}

// Init writes the header of a new ring: indices and flags zero, the
// geometry for information.
func (r *Ring) Init() {
	clear(r.mem[:RingHeaderLen])
	r.u32(OffSlots).Store(r.slots)
	r.u32(OffSlotSize).Store(uint32(r.size))
}

func (r *Ring) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}

// Len returns the number of slots.
func (r *Ring) Len() uint32 { return r.slots }

// SlotBytes returns the size of a slot.
func (r *Ring) SlotBytes() int { return r.size }

// Slot returns the slot of free-running index i.
func (r *Ring) Slot(i uint32) []byte {
	o := RingHeaderLen + int(i&(r.slots-1))*r.size
	return r.mem[o : o+r.size : o+r.size]
}

// Producer loads the producer index (acquire).
func (r *Ring) Producer() uint32 { return r.u32(OffProducer).Load() }

// SetProducer stores the producer index (release).
func (r *Ring) SetProducer(v uint32) { r.u32(OffProducer).Store(v) }

// Consumer loads the consumer index.
func (r *Ring) Consumer() uint32 { return r.u32(OffConsumer).Load() }

// SetConsumer stores the consumer index.
func (r *Ring) SetConsumer(v uint32) { r.u32(OffConsumer).Store(v) }

// Flags loads the flags word.
func (r *Ring) Flags() uint32 { return r.u32(OffFlags).Load() }

// SetFlags stores the flags word.
func (r *Ring) SetFlags(v uint32) { r.u32(OffFlags).Store(v) }

// SwapFlags stores v in the flags word and returns the old value.
func (r *Ring) SwapFlags(v uint32) uint32 { return r.u32(OffFlags).Swap(v) }

// AddOverrun counts a completion lost to a full CQ ring.
func (r *Ring) AddOverrun() { r.u32(OffOverrun).Add(1) }

// AddEvent counts a completion event sent for a CQ ring.
func (r *Ring) AddEvent() { r.u32(OffEvents).Add(1) }

// Events returns the completion events sent for a CQ ring.
func (r *Ring) Events() uint32 { return r.u32(OffEvents).Load() }

// Posted returns the index up to which the daemon has posted a receive
// ring's requests to its QP or SRQ.
func (r *Ring) Posted() uint32 { return r.u32(OffPosted).Load() }

// SetPosted stores the posted index.
func (r *Ring) SetPosted(v uint32) { r.u32(OffPosted).Store(v) }

// Retired returns a send ring's count of requests the QP has retired.
func (r *Ring) Retired() uint32 { return r.u32(OffRetired).Load() }

// SetRetired stores a send ring's count of retired requests (release).
func (r *Ring) SetRetired(v uint32) { r.u32(OffRetired).Store(v) }

// Refused returns a send ring's count of requests the daemon refused.
func (r *Ring) Refused() uint32 { return r.u32(OffRefused).Load() }

// SetRefused stores a send ring's count of refused requests (release).
func (r *Ring) SetRefused(v uint32) { r.u32(OffRefused).Store(v) }

// Outstanding returns how many of a send ring's requests, up to the
// producer index prod, are neither retired nor refused: the work
// ibv_post_send counts against max_send_wr.
func (r *Ring) Outstanding(prod uint32) uint32 { return prod - r.Retired() - r.Refused() }

// SetOverrun and SetEvents store the CQ counters (a resized CQ's new
// ring takes them over).
func (r *Ring) SetOverrun(v uint32) { r.u32(OffOverrun).Store(v) }
func (r *Ring) SetEvents(v uint32)  { r.u32(OffEvents).Store(v) }

// Overrun returns the completions lost to a full CQ ring.
func (r *Ring) Overrun() uint32 { return r.u32(OffOverrun).Load() }
