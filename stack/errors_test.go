package stack

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/uroce/uroce/link/pipe"
)

// TestErrorsWrappedOnce checks that a verbs error names its operation
// and QP once: each layer adds only what it knows.
func TestErrorsWrappedOnce(t *testing.T) {
	clock := NewFakeClock(0)
	pa, _ := pipe.New(pipe.Config{MTU: 1500, Slots: 64})
	d := openManual(t, pa, macA, []netip.Addr{ipA}, clock)
	A := newSide(t, d, 4096, 16)
	q := A.qp(t, RC)
	_, batchErr := q.PostSendBatch([]SendWR{{Op: OpSend}})
	for _, c := range []struct {
		err        error
		op, prefix string
		is         error
	}{
		{q.PostSend(&SendWR{Op: OpSend}), "post send", "post send: qp 0x11 in RESET: ", ErrInvalidState},
		{q.PostRecv(&RecvWR{}), "post recv", "post recv: qp 0x11 in RESET: ", ErrInvalidState},
		{q.ToRTS(RTSAttr{}), "modify qp", "modify qp 0x11: RC RESET to RTS: ", ErrInvalidState},
		{batchErr, "post send", "wr 0: post send: qp 0x11 in RESET: ", ErrInvalidState},
	} {
		msg := c.err.Error()
		if !errors.Is(c.err, c.is) || !strings.HasPrefix(msg, c.prefix) ||
			strings.Count(msg, c.op) != 1 || strings.Count(msg, "0x11") != 1 {
			t.Errorf("%q: want one %q, prefix %q, errors.Is %v", msg, c.op, c.prefix, c.is)
		}
	}
}
