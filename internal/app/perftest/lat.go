package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/uroce/uroce/internal/spin"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// pollOne waits for one completion on cq, under ctx (the run's, or a
// duration run's that ends with it).
func (s *session) pollOne(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	for {
		if cq.Poll(s.wcs[:1]) == 1 {
			return s.wcs[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, fmt.Errorf("poll CQ failed: %w", err)
		}
	}
}

// busySpin is how long waitByte spins on the byte before it falls back to
// its poll(2)-mode loop when the engines busy-poll.
const busySpin = 100 * time.Microsecond

// waitByte waits until the byte at off of the buffer reads want: the peer
// writes it with RDMA WRITE, and ib_write_lat's sides poll their memory
// for it. The engine writes the payload while this goroutine reads: as
// with an RNIC's DMA, nothing orders the two but the byte itself, so it is
// read with an atomic load of its aligned word (never cached in a
// register). Go's race detector sees the engine's copy and this load as
// a race; the tests skip ib_write_lat under it.
//
// With busy-polling engines it first spins for busySpin, yielding the
// processor to other goroutines only, and looks at the context and the
// QP's state (whose lock the engine takes) every 64 checks. Then, and
// from the start with engines sleeping in poll(2), it checks 64 times and
// sleeps 20 µs between further checks. A Go sleep that short lasts about
// a millisecond in an idle process, but here it ends when the engine's
// goroutine comes back from poll(2) with the peer's write (the runtime
// runs expired timers as it reschedules): spinning for longer in poll(2)
// mode only kept a CPU from the engines, and on a two-CPU host with both
// peers on it raised the 99th percentile (measured with uroce perf write
// --lat between two namespaces).
func (s *session) waitByte(q verbs.QP, off uint64, want byte) error {
	word := (*uint32)(unsafe.Pointer(&s.buf[off&^3]))
	shift := 8 * (off & 3)
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		shift = 8 * (3 - off&3)
	}
	arrived := func() bool { return byte(atomic.LoadUint32(word)>>shift) == want }
	if _, local := verbs.StackDevice(s.dev); !local {
		// On the daemon's device no engine runs in this process to
		// end a short sleep early: a Go sleep of 20 µs would last a
		// millisecond. So spin, giving the CPU up to other processes
		// (the daemon's engines among them) between checks.
		for spins := 1; !arrived(); spins++ {
			if spins%64 == 0 {
				if err := s.waitErr(q); err != nil {
					return err
				}
			}
			spin.Relax(spins)
		}
		return nil
	}
	if s.cfg.BusyPoll {
		until := time.Now().Add(busySpin)
		for spins := 1; !arrived(); spins++ {
			if spins%64 == 0 {
				if err := s.waitErr(q); err != nil {
					return err
				}
				if !time.Now().Before(until) {
					break
				}
			}
			runtime.Gosched()
		}
	}
	for spins := 0; !arrived(); spins++ {
		if err := s.waitErr(q); err != nil {
			return err
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return nil
}

// errEnded is waitByte's answer when a duration run's end comes first.
var errEnded = errors.New("the duration ended")

// waitErr says why waitByte must stop waiting, if it must.
func (s *session) waitErr(q verbs.QP) error {
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("waiting for the peer's write: %w", err)
	}
	if !s.waitEnd.IsZero() && !time.Now().Before(s.waitEnd) {
		return errEnded
	}
	if q.State() == stack.StateErr {
		return fmt.Errorf("waiting for the peer's write: qp %#x is in the error state", q.QPN())
	}
	return nil
}

// runLatWrite is ib_write_lat's run (run_iter_lat_write), on both sides:
// each side writes the message with its last byte set to its send count,
// and waits for the peer's write of its receive count in its own memory.
// The server writes first.
func (s *session) runLatWrite(size uint64) ([]int64, error) {
	cfg := &s.cfg
	iters := uint64(cfg.Iters)
	q := s.qps[0]
	postOff := size - 1
	pollOff := uint64(cfg.QPs)*s.buffSize + size - 1
	posted := make([]int64, iters)
	var scnt, ccnt, rcnt uint64
	for scnt < iters || ccnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !cfg.Client) {
			rcnt++
			if err := s.waitByte(q, pollOff, byte(rcnt)); err != nil {
				return nil, err
			}
		}
		if scnt < iters {
			posted[scnt] = s.now()
			scnt++
			s.buf[postOff] = byte(scnt)
			wr := s.opWR(0, s.mr.Addr(), s.remote[0].VAddr, size)
			wr.Flags = stack.SendSignaled
			if err := q.PostSend(wr); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if ccnt < iters {
			wc, err := s.pollOne(s.ctx, s.sendCQ)
			if err != nil {
				return nil, err
			}
			if wc.Status != stack.WCSuccess {
				err := s.sendFailed(&wc, scnt, ccnt)
				if wc.Status == stack.WCRetryExcErr && rcnt >= iters && ccnt == iters-1 {
					// The peer's last WRITE arrived: it is done and
					// may have left without our last WRITE's ACK
					// reaching us, as the stock tools do.
					err = fmt.Errorf("%w (%s)", err, PeerLeftHint)
				}
				return nil, err
			}
			ccnt++
		}
	}
	return posted, nil
}

// PeerLeftHint explains a retry failure of ib_write_lat's last WRITE
// after the peer's last WRITE arrived.
const PeerLeftHint = "the peer's last WRITE arrived: the peer may have left before the ACK of our last one reached us"

// runLatRead is ib_read_lat's client run (run_iter_lat): one signaled
// READ at a time.
func (s *session) runLatRead(size uint64) ([]int64, error) {
	iters := uint64(s.cfg.Iters)
	q := s.qps[0]
	posted := make([]int64, iters)
	for scnt := uint64(0); scnt < iters; {
		posted[scnt] = s.now()
		scnt++
		wr := s.opWR(0, s.mr.Addr(), s.remote[0].VAddr, size)
		wr.Flags = stack.SendSignaled
		if err := q.PostSend(wr); err != nil {
			return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		wc, err := s.pollOne(s.ctx, s.sendCQ)
		if err != nil {
			return nil, err
		}
		if wc.Status != stack.WCSuccess {
			return nil, s.sendFailed(&wc, scnt, scnt)
		}
	}
	return posted, nil
}

// runLatSend is ib_send_lat's run (run_iter_lat_send), on both sides: the
// client sends first; each side sends once it has received, reposting
// receives while more messages are due.
func (s *session) runLatSend(size uint64) ([]int64, error) {
	cfg := &s.cfg
	iters := uint64(cfg.Iters)
	q := s.qps[0]
	posted := make([]int64, iters)
	perQP := uint64(cfg.RxDepth)
	cqMod := uint64(cfg.CQMod)
	var scnt, rcnt uint64
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && cfg.Client) {
			wc, err := s.pollOne(s.ctx, s.recvCQ)
			if err != nil {
				return nil, err
			}
			if wc.Status != stack.WCSuccess {
				return nil, s.recvFailed(&wc, rcnt)
			}
			rcnt++
			if rcnt+perQP <= iters {
				if err := q.PostRecv(s.recvWRAt(0, s.recvBase(0), size)); err != nil {
					return nil, fmt.Errorf("couldn't post recv: rcnt=%d: %w", rcnt, err)
				}
			}
		}
		if scnt < iters {
			posted[scnt] = s.now()
			scnt++
			wr := s.opWR(0, s.mr.Addr(), 0, size)
			signaled := scnt%cqMod == 0 || scnt == iters
			if signaled {
				wr.Flags = stack.SendSignaled
			}
			if err := q.PostSend(wr); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			if signaled {
				wc, err := s.pollOne(s.ctx, s.sendCQ)
				if err != nil {
					return nil, err
				}
				if wc.Status != stack.WCSuccess {
					return nil, s.sendFailed(&wc, scnt, scnt)
				}
			}
		}
	}
	return posted, nil
}
