package stack

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/uroce/uroce/internal/fifo"
)

// firstQPN is the first QPN handed out; QP0 and QP1 (the GSI QP of
// connection management) are reserved and 2–0x10 stay unused, as in
// rdma_rxe.
const firstQPN = 0x11

// qpTable maps QPNs to QPs. Engines look QPNs up per packet without
// locking; creation and destruction take the mutex.
type qpTable struct {
	gsi   atomic.Pointer[QP] // QPN 1, outside the numbered slots
	mu    sync.Mutex
	slots atomic.Pointer[[]atomic.Pointer[QP]] // index qpn-firstQPN
	free  fifo.Queue[uint32]                   // released indices, reused oldest first
	next  uint32                               // first index never used
	max   int
	live  int
}

func (t *qpTable) init(max int) { t.max = max }

// add assigns q a QPN and publishes it: QPN 1 for the GSI QP, of which
// there is one (ErrBusy while it lives).
func (t *qpTable) add(q *QP) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q.init.GSI {
		if t.gsi.Load() != nil {
			return fmt.Errorf("qp1: %w", ErrBusy)
		}
		q.qpn = GSIQPN
		t.gsi.Store(q)
		return nil
	}
	if t.live >= t.max {
		return fmt.Errorf("%d qps: %w", t.max, ErrNoResources)
	}
	var idx uint32
	// Fresh numbers first, so that a destroyed QP's number comes back
	// as late as possible and its stray packets find nobody.
	if int(t.next) < t.max || t.free.Len() == 0 {
		idx = t.next
		t.next++
	} else {
		idx = t.free.Pop()
	}
	s := t.slots.Load()
	if s == nil || int(idx) >= len(*s) {
		n := 64
		if s != nil {
			n = 2 * len(*s)
		}
		for n <= int(idx) {
			n *= 2
		}
		ns := make([]atomic.Pointer[QP], n)
		if s != nil {
			for i := range *s {
				ns[i].Store((*s)[i].Load())
			}
		}
		t.slots.Store(&ns)
		s = &ns
	}
	q.qpn = firstQPN + idx
	(*s)[idx].Store(q)
	t.live++
	return nil
}

// remove unpublishes q and frees its number.
func (t *qpTable) remove(q *QP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q.qpn == GSIQPN {
		t.gsi.CompareAndSwap(q, nil)
		return
	}
	idx := q.qpn - firstQPN
	s := t.slots.Load()
	if s == nil || int(idx) >= len(*s) || (*s)[idx].Load() != q {
		return
	}
	(*s)[idx].Store(nil)
	t.free.Push(idx)
	t.live--
}

// lookup returns the QP numbered qpn, or nil.
func (t *qpTable) lookup(qpn uint32) *QP {
	if qpn == GSIQPN {
		return t.gsi.Load()
	}
	idx := qpn - firstQPN
	s := t.slots.Load()
	if s == nil || uint64(idx) >= uint64(len(*s)) {
		return nil
	}
	return (*s)[idx].Load()
}

// each calls f for every live QP.
func (t *qpTable) each(f func(*QP)) {
	if q := t.gsi.Load(); q != nil {
		f(q)
	}
	s := t.slots.Load()
	if s == nil {
		return
	}
	for i := range *s {
		if q := (*s)[i].Load(); q != nil {
			f(q)
		}
	}
}
