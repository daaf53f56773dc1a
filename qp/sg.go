package qp

// sgWalk walks a scatter/gather list from a byte offset. Each step gives
// the part of one SGE that the next bytes of a transfer touch, so the
// send path (gather), READ responses and atomic results (scatterSend)
// and receives (scatterRecv) share one walk over SGEs.
type sgWalk struct {
	sgs []SGE
	rel uint32 // offset into sgs[0]
}

// walkFrom returns a walk over sgs from byte off.
func walkFrom(sgs []SGE, off uint32) sgWalk {
	for len(sgs) > 0 && off >= sgs[0].Length {
		off -= sgs[0].Length
		sgs = sgs[1:]
	}
	return sgWalk{sgs: sgs, rel: off}
}

// next returns the part of the current SGE that holds the next bytes,
// at most n, and moves past it. It reports false at the end of the list.
func (w *sgWalk) next(n uint32) (SGE, bool) {
	for len(w.sgs) > 0 && w.rel >= w.sgs[0].Length {
		w.sgs, w.rel = w.sgs[1:], 0
	}
	if len(w.sgs) == 0 {
		return SGE{}, false
	}
	sg := w.sgs[0]
	take := min(sg.Length-w.rel, n)
	part := SGE{Addr: sg.Addr + uint64(w.rel), Length: take, LKey: sg.LKey}
	w.rel += take
	return part, true
}

// scatter writes data into the memory sgs name from byte off, with the
// access need. It reports false when a key or range does not check or
// the list ends first.
func scatter(mem Memory, sgs []SGE, off uint32, data []byte, need Access) bool {
	w := walkFrom(sgs, off)
	for len(data) > 0 {
		part, ok := w.next(uint32(len(data)))
		if !ok {
			return false
		}
		b, ok := mem.Local(part.LKey, part.Addr, part.Length, need)
		if !ok || uint32(len(b)) < part.Length {
			return false
		}
		data = data[copy(b, data[:part.Length]):]
	}
	return true
}
