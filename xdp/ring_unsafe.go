package xdp

// This file holds the package's unsafe code that is not Linux-specific:
// turning a ring's memory (a kernel mapping, or plain memory in tests) into
// typed views.

import (
	"fmt"
	"unsafe"
)

// ringMemSize returns the length of a ring mapping with n entries of T.
func ringMemSize[T any](off ringOffsets, n uint32) int {
	var zero T
	return int(off.desc) + int(n)*int(unsafe.Sizeof(zero))
}

// ringViews returns the index words and the entry array of a ring of n
// entries of T laid out in mem at off. It checks that every part lies
// inside mem and is aligned.
func ringViews[T any](mem []byte, off ringOffsets, n uint32) (producer, consumer, flags *uint32, entries []T, err error) {
	var zero T
	size, align := uint64(unsafe.Sizeof(zero)), uint64(unsafe.Alignof(zero))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	word := func(o uint64) (*uint32, error) {
		if o+4 > uint64(len(mem)) || (uint64(base)+o)%4 != 0 {
			return nil, fmt.Errorf("ring index word at offset %d outside or misaligned in %d bytes", o, len(mem))
		}
		return (*uint32)(unsafe.Pointer(&mem[o])), nil
	}
	if producer, err = word(off.producer); err != nil {
		return
	}
	if consumer, err = word(off.consumer); err != nil {
		return
	}
	if flags, err = word(off.flags); err != nil {
		return
	}
	if n == 0 || n&(n-1) != 0 {
		return nil, nil, nil, nil, fmt.Errorf("ring of %d entries: not a power of two", n)
	}
	if off.desc+uint64(n)*size > uint64(len(mem)) || (uint64(base)+off.desc)%align != 0 {
		return nil, nil, nil, nil, fmt.Errorf("ring entries at offset %d outside or misaligned in %d bytes", off.desc, len(mem))
	}
	entries = unsafe.Slice((*T)(unsafe.Pointer(&mem[off.desc])), n)
	return producer, consumer, flags, entries, nil
}
