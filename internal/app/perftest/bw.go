package perftest

import (
	"fmt"
	"math"
	"time"

	pt "github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// runBW is the client's measured run of the bandwidth tools
// (run_iter_bw): each QP keeps up to tx_depth requests in flight, posted
// in lists of post_list,
// every cq_mod-th and the last signaled, the local and remote addresses
// stepping through a cycle buffer for small messages.
func (s *session) runBW(size uint64) (pt.Report, error) {
	cfg := &s.cfg
	nq := len(s.qps)
	iters := uint64(cfg.Iters)
	tot := iters * uint64(nq)
	posted := make([]int64, tot)
	completed := make([]int64, tot)
	c := s.newBWCursor(size)
	scnt, ccnt, tx, cqMod := c.scnt, c.ccnt, c.tx, c.cqMod
	pl := min(uint64(cfg.PostList), tx)
	var totS, totC uint64
	for totS < tot || totC < tot {
		for i, q := range s.qps {
			// A post list of pl requests goes when it fits whole.
			for scnt[i] < iters && scnt[i]-ccnt[i]+pl <= tx {
				for range pl {
					posted[totS] = s.now()
					if err := s.postBW(c, i, q, size, scnt[i] == iters-1); err != nil {
						return pt.Report{}, err
					}
					totS++
				}
			}
		}
		if totC >= tot {
			continue
		}
		wcs, err := s.poll(s.ctx, s.sendCQ)
		if err != nil {
			return pt.Report{}, err
		}
		for k := range wcs {
			wc := &wcs[k]
			if err := s.checkSendWC(wc, nq, totS, totC); err != nil {
				return pt.Report{}, err
			}
			ccnt[wc.ID] += cqMod
			totC += cqMod
			t := s.now()
			if totC > tot {
				completed[tot-1] = t
			} else {
				completed[totC-1] = t
			}
		}
	}
	if completed[0] == 0 {
		// Unsignaled: perftest starts its search for the peak from
		// this unset entry, whose difference wraps to the largest
		// value; so must MeasureBW.
		completed[0] = math.MaxInt64 / 2
	}
	return pt.MeasureBW(size, posted, completed, int(cqMod), 1e9, cfg.Gbits)
}

// runBWServer is ib_send_bw's server (run_iter_bw_server): it counts the
// receives and reposts each while more messages are due. Its report has no
// peak, as perftest's server has none. In duration mode its clock starts
// with the first receive, every receive is reposted, and the report is
// the rate of the receives while the clock sampled.
func (s *session) runBWServer(size uint64) (pt.Report, error) {
	cfg := &s.cfg
	nq := len(s.qps)
	iters := uint64(cfg.Iters)
	tot := iters * uint64(nq)
	dur := cfg.Duration > 0
	rs := s.newRecvState()
	rcnt := rs.rcnt
	var clock durClock
	ctx := s.ctx
	cancel := func() {}
	defer func() { cancel() }()
	var total, counted uint64
	var first, last int64
	for dur || total < tot {
		wcs, err := s.pollEnd(ctx, s.recvCQ)
		if err != nil {
			return pt.Report{}, err
		}
		now := time.Now()
		if dur && total > 0 && clock.ended(now) {
			break
		}
		if total == 0 {
			first = s.now()
			if dur {
				// set_on_first_rx_packet
				clock = s.newClock(now)
				ctx, cancel = s.until(&clock)
			}
		}
		sampling := dur && clock.sampling(now)
		for k := range wcs {
			wc := &wcs[k]
			i := int(wc.ID)
			if i >= nq {
				return pt.Report{}, fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			if wc.Status != stack.WCSuccess {
				return pt.Report{}, s.recvFailed(wc, rcnt[i])
			}
			rcnt[i]++
			total++
			if sampling {
				counted++
			}
			if err := s.repost(rs, i, size, dur || rs.posted[i]+1 <= iters); err != nil {
				return pt.Report{}, err
			}
		}
	}
	if dur {
		return s.rateReport(size, counted, clock.sample()), nil
	}
	last = s.now()
	rep := s.rateReport(size, tot, float64(last-first)/1e9)
	if last == first {
		rep.BWAvg, rep.MsgRate = 0, 0
	}
	return rep, nil
}

// runBWDuration is the client's run in duration mode (-D, run_iter_bw
// with test_type DURATION): requests go for Duration; the completions
// that come while the clock samples are counted (in units of cq_mod, as
// perftest counts them) and the report is their rate over the sample,
// with no peak (perftest's duration mode sets noPeak).
func (s *session) runBWDuration(size uint64) (pt.Report, error) {
	nq := len(s.qps)
	c := s.newBWCursor(size)
	scnt, ccnt, tx, cqMod := c.scnt, c.ccnt, c.tx, c.cqMod
	clock := s.newClock(time.Now())
	var counted uint64
	var totS, totC uint64
	for {
		stopping := clock.ended(time.Now())
		for i, q := range s.qps {
			// Past the end, only what completes a signaled group
			// still goes, so that every request's completion comes.
			for scnt[i]-ccnt[i]+1 <= tx && (!stopping || scnt[i]%cqMod != 0) {
				if err := s.postBW(c, i, q, size, false); err != nil {
					return pt.Report{}, err
				}
				totS++
			}
		}
		if stopping && totC >= totS {
			break
		}
		wcs, err := s.poll(s.ctx, s.sendCQ)
		if err != nil {
			return pt.Report{}, err
		}
		sampling := clock.sampling(time.Now())
		for k := range wcs {
			wc := &wcs[k]
			if err := s.checkSendWC(wc, nq, totS, totC); err != nil {
				return pt.Report{}, err
			}
			ccnt[wc.ID] += cqMod
			totC += cqMod
			if sampling {
				counted += cqMod
			}
		}
	}
	return s.rateReport(size, counted, clock.sample()), nil
}

// runBi is ib_send_bw -b (run_iter_bi), on both sides at once: each QP
// keeps tx_depth SENDs in flight as runBW does while the receives are
// counted and reposted as runBWServer does, both completing on one CQ.
// The server sends only once the client's first message has arrived. The
// report is runBW's, from the sends. In duration mode the client's
// clock starts with the run, the server's with its first receive; the
// receives and the send completions (in units of cq_mod) of the sample
// are counted together, and the run stops at the end without waiting
// for what is in flight, as perftest's does.
func (s *session) runBi(size uint64) (pt.Report, error) {
	cfg := &s.cfg
	nq := len(s.qps)
	iters := uint64(cfg.Iters)
	tot := iters * uint64(nq)
	dur := cfg.Duration > 0
	c := s.newBWCursor(size)
	scnt, ccnt, tx, cqMod := c.scnt, c.ccnt, c.tx, c.cqMod
	pl := min(uint64(cfg.PostList), tx)
	var posted, completed []int64
	if !dur {
		posted, completed = make([]int64, tot), make([]int64, tot)
	}
	rs := s.newRecvState()
	rcnt := rs.rcnt
	var clock durClock
	started := false
	ctx := s.ctx
	cancel := func() {}
	defer func() { cancel() }()
	start := func(now time.Time) {
		clock, started = s.newClock(now), true
		ctx, cancel = s.until(&clock)
	}
	sending := cfg.Client
	if dur && sending {
		start(time.Now())
	}
	var totS, totC, totR, counted uint64
	for {
		if dur && started && clock.ended(time.Now()) || !dur && totC >= tot && totR >= tot {
			break
		}
		for i, q := range s.qps {
			for sending && (dur || scnt[i] < iters) && scnt[i]-ccnt[i]+pl <= tx {
				for range pl {
					if !dur {
						posted[totS] = s.now()
					}
					if err := s.postBW(c, i, q, size, !dur && scnt[i] == iters-1); err != nil {
						return pt.Report{}, err
					}
					totS++
				}
			}
		}
		wcs, err := s.pollEnd(ctx, s.sendCQ)
		if err != nil {
			return pt.Report{}, err
		}
		now := time.Now()
		for k := range wcs {
			wc := &wcs[k]
			if wc.Opcode == stack.WCRecv {
				i := int(wc.ID)
				if i >= nq {
					return pt.Report{}, fmt.Errorf("completion for unknown wr_id %d", wc.ID)
				}
				if wc.Status != stack.WCSuccess {
					return pt.Report{}, s.recvFailed(wc, totR)
				}
				if !sending {
					sending = true
					if dur {
						start(now)
					}
				}
				rcnt[i]++
				totR++
				if dur && clock.sampling(now) {
					counted++
				}
				if err := s.repost(rs, i, size, dur || rs.posted[i]+1 <= iters); err != nil {
					return pt.Report{}, err
				}
				continue
			}
			if err := s.checkSendWC(wc, nq, totS, totC); err != nil {
				return pt.Report{}, err
			}
			ccnt[wc.ID] += cqMod
			totC += cqMod
			switch {
			case dur:
				if started && clock.sampling(now) {
					counted += cqMod
				}
			case totC > tot:
				completed[tot-1] = s.now()
			default:
				completed[totC-1] = s.now()
			}
		}
	}
	if dur {
		return s.rateReport(size, counted, clock.sample()), nil
	}
	if completed[0] == 0 {
		completed[0] = math.MaxInt64 / 2 // as in runBW
	}
	return pt.MeasureBW(size, posted, completed, int(cqMod), 1e9, cfg.Gbits)
}

// bwCursor is where a bandwidth client's QPs are: requests posted
// (scnt) and completed (ccnt), the next local and remote addresses in
// the cycle buffers, and the window the run keeps (tx) with its
// signaling interval (cqMod).
type bwCursor struct {
	scnt, ccnt, loc, rem []uint64
	tx, cqMod            uint64
}

func (s *session) newBWCursor(size uint64) *bwCursor {
	cfg := &s.cfg
	nq := len(s.qps)
	c := &bwCursor{scnt: make([]uint64, nq), ccnt: make([]uint64, nq), loc: make([]uint64, nq),
		rem: make([]uint64, nq), tx: uint64(cfg.TxDepth), cqMod: uint64(cfg.CQMod)}
	for i := range s.qps {
		c.loc[i] = s.mr.Addr() + uint64(i)*s.buffSize
		c.rem[i] = s.remote[i].VAddr
	}
	if cfg.verb() == pt.Read && cfg.ReadWindow >= 0 {
		// READs in flight: at most the read window's worth (but one).
		win := uint64(cfg.ReadWindow)
		if win == 0 {
			win = DefaultReadWindow
		}
		c.tx = min(c.tx, max(win/size, 1))
		// Every completion must come within the window.
		c.cqMod = min(c.cqMod, c.tx)
	}
	return c
}

// postBW posts QP i's next request, signaled every cq_mod-th or when
// last, and steps its addresses.
func (s *session) postBW(c *bwCursor, i int, q verbs.QP, size uint64, last bool) error {
	n := c.scnt[i]
	wr := s.opWR(i, c.loc[i], c.rem[i], size)
	if n%c.cqMod == c.cqMod-1 || last {
		wr.Flags |= stack.SendSignaled
	}
	if err := q.PostSend(wr); err != nil {
		return fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", i, n, err)
	}
	c.loc[i] = s.incLoc(c.loc[i], s.mr.Addr()+uint64(i)*s.buffSize, size, n)
	if s.cfg.verb() != pt.Send {
		c.rem[i] = s.incLoc(c.rem[i], s.remote[i].VAddr, size, n)
	}
	c.scnt[i]++
	return nil
}

// checkSendWC checks a bandwidth client's send completion: a success,
// naming one of its nq QPs (wr_id is the QP's index).
func (s *session) checkSendWC(wc *verbs.WC, nq int, totS, totC uint64) error {
	if wc.Status != stack.WCSuccess {
		return s.sendFailed(wc, totS, totC)
	}
	if int(wc.ID) >= nq {
		return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
	}
	return nil
}

// recvState is a receiving side's counts per QP: receives completed,
// receives posted (the first RxDepth), and the address of the next
// repost (reposts start over at the first receive address, as
// ctx_set_recv_wqes leaves it).
type recvState struct{ rcnt, posted, next []uint64 }

func (s *session) newRecvState() *recvState {
	nq := len(s.qps)
	r := &recvState{rcnt: make([]uint64, nq), posted: make([]uint64, nq), next: make([]uint64, nq)}
	for i := range s.qps {
		r.posted[i] = uint64(s.cfg.RxDepth)
		r.next[i] = s.recvBase(i)
	}
	return r
}

// repost posts QP i's next receive when more is wanted.
func (s *session) repost(r *recvState, i int, size uint64, want bool) error {
	if !want {
		return nil
	}
	if err := s.qps[i].PostRecv(s.recvWRAt(i, r.next[i], size)); err != nil {
		return fmt.Errorf("couldn't post recv Qp=%d rcnt=%d: %w", i, r.rcnt[i], err)
	}
	r.posted[i]++
	r.next[i] = s.incRecv(r.next[i], s.recvBase(i), size, r.posted[i])
	return nil
}
