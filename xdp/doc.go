// Package xdp implements AF_XDP sockets on golang.org/x/sys/unix: a UMEM
// with a frame allocator, the fill, RX, TX and completion rings, batch
// receive and transmit, need_wakeup, copy and zero-copy binding,
// multi-buffer frames and the kernel's statistics.
//
// # Why not asavie/xdp
//
// uroce does not build on github.com/asavie/xdp (v0.3.3, archived). Its
// Close leaves the four ring mappings in place, so the socket stays alive
// and the queue cannot be bound again in the same process (EBUSY); its ring
// indices are read and written without atomics; it never reads the
// need_wakeup flags; Transmit panics on unexpected errors; Stats dereferences
// nil without an RX ring; Program.Unregister always fails (EINVAL: delete on
// an array map) and Detach loops forever in generic mode; attach mode and bind
// flags are package globals, Attach removes whatever XDP program the
// interface had, and its program redirects every frame of the queue,
// including ARP and SSH, to the socket. It also lacks multi-buffer frames,
// which RoCE at path MTU 4096 needs (a 4 KiB chunk cannot hold such a frame
// and larger chunks are refused). Writing the rings directly on
// golang.org/x/sys/unix is a few hundred lines and avoids all of this; the
// XDP side lives in package bpf.
//
// # Using a socket
//
// Open binds a socket to one queue; an XDP program (package bpf) must
// redirect the queue's frames to it, by registering FD. Receive returns
// batches of frames as views into the UMEM, valid until Release (or the next
// Receive); Transmit copies frames into free chunks and queues them;
// Complete reclaims the chunks of sent frames; Wait blocks in ppoll(2) until
// frames arrive. None of these allocate. Frames larger than a chunk, with
// Config.MultiBuffer, arrive as several descriptors (XDP_PKT_CONTD), which
// Receive assembles into one contiguous frame in a per-socket buffer, and
// are sent as chains of descriptors.
//
// Of a socket's Frames chunks, up to RingSize (at most half) circulate
// between the fill ring, the RX ring and the application; the others are a
// free list for transmit. Each socket has its own UMEM (shared UMEM is not
// supported); use one socket per queue for several queues.
//
// # Goroutines
//
// A Socket belongs to one goroutine, which calls all its methods
// (Receive, Release, Transmit, Complete, Wait, Stats, Close); nothing in it
// is locked. Other goroutines hand frames to that goroutine, for example
// through channels. FD may be read from anywhere. This matches a
// run-to-completion engine per queue.
//
// # The rings
//
// Each ring is a type over one of two generic cores, the producer side (fill
// and TX rings) or the consumer side (RX and completion rings). Indices are
// free-running uint32 shared with the kernel and accessed with sync/atomic;
// each side caches the other's index and re-reads it only when the cache
// does not allow the operation. The unsafe code that turns mappings into
// ring views is in ring_unsafe.go and sys_unsafe_linux.go.
package xdp
