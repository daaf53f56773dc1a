package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pt "github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// durClock is perftest's duration mode (-D, catch_alarm's states) from
// a run's start: Margin of warm-up, the sample until Margin before the
// end, then the cool-down. What completes while the clock samples is
// counted; the run stops at the end.
type durClock struct{ from, to, end time.Time }

func (s *session) newClock(start time.Time) durClock {
	cfg := &s.cfg
	return durClock{from: start.Add(cfg.Margin), to: start.Add(cfg.Duration - cfg.Margin), end: start.Add(cfg.Duration)}
}

func (c *durClock) sampling(t time.Time) bool { return !t.Before(c.from) && t.Before(c.to) }
func (c *durClock) ended(t time.Time) bool    { return !t.Before(c.end) }

// sample is the sampled time in seconds (perftest's tcompleted[0] -
// tposted[0], both taken by the alarms).
func (c *durClock) sample() float64 { return c.to.Sub(c.from).Seconds() }

// until returns a context of the run that ends with the clock.
func (s *session) until(c *durClock) (context.Context, context.CancelFunc) {
	return context.WithDeadline(s.ctx, c.end)
}

// past reports whether err is ctx's end (a duration run's), not the
// run's own failure or cancellation.
func (s *session) past(ctx context.Context, err error) bool {
	return err != nil && s.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// pollEnd is poll under a duration run's ctx: at its end it returns no
// completions and no error.
func (s *session) pollEnd(ctx context.Context, cq verbs.CQ) ([]verbs.WC, error) {
	wcs, err := s.poll(ctx, cq)
	if s.past(ctx, err) {
		return nil, nil
	}
	return wcs, err
}

// rateReport is a duration run's report (print_report_bw with noPeak):
// counted messages of size bytes in secs seconds, no peak.
func (s *session) rateReport(size, counted uint64, secs float64) pt.Report {
	format := float64(0x100000)
	if s.cfg.Gbits {
		format = 125000000
	}
	return pt.Report{Size: size, Iters: counted, BWAvg: float64(size) * float64(counted) / (secs * format),
		MsgRate: float64(counted) / (secs * 1e6)}
}

// runLatDuration is a latency tool's measured run in duration mode: the
// iterations completed while the clock sampled, printed as
// print_report_lat_duration does.
func (s *session) runLatDuration(size uint64) error {
	cfg := &s.cfg
	var st pt.LatDurStats
	var err error
	switch cfg.Tool {
	case pt.WriteLat:
		st, err = s.runLatWriteDuration(size)
	case pt.ReadLat, pt.AtomicLat:
		st, err = s.runLatReadDuration(size)
	case pt.SendLat:
		st, err = s.runLatSendDuration(size)
	}
	if err != nil {
		return err
	}
	s.res.LatDur = append(s.res.LatDur, st)
	io.WriteString(cfg.Stdout, pt.LatDurLine(st))
	return nil
}

// runLatWriteDuration is run_iter_lat_write in duration mode: the
// ping-pong of runLatWrite, both clocks started by the barrier before,
// counting this side's completed WRITEs. A side that ends while it
// waits for the peer's byte still posts its WRITE, as perftest's does;
// none is waited for past the end.
func (s *session) runLatWriteDuration(size uint64) (pt.LatDurStats, error) {
	cfg := &s.cfg
	q := s.qps[0]
	postOff := size - 1
	pollOff := uint64(cfg.QPs)*s.buffSize + size - 1
	clock := s.newClock(time.Now())
	ctx, cancel := s.until(&clock)
	defer cancel()
	s.waitEnd = clock.end
	defer func() { s.waitEnd = time.Time{} }()
	var scnt, rcnt, counted uint64
	for !clock.ended(time.Now()) {
		if !(scnt < 1 && !cfg.Client) {
			rcnt++
			if err := s.waitByte(q, pollOff, byte(rcnt)); err != nil && !errors.Is(err, errEnded) {
				return pt.LatDurStats{}, err
			}
		}
		scnt++
		s.buf[postOff] = byte(scnt)
		wr := s.opWR(0, s.mr.Addr(), s.remote[0].VAddr, size)
		wr.Flags = stack.SendSignaled
		if err := q.PostSend(wr); err != nil {
			return pt.LatDurStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		if clock.ended(time.Now()) {
			break
		}
		if past, err := s.sendDone(ctx, scnt, scnt-1); past {
			break
		} else if err != nil {
			return pt.LatDurStats{}, err
		}
		if clock.sampling(time.Now()) {
			counted++
		}
	}
	return pt.MeasureLatDuration(size, counted, clock.sample(), 2), nil
}

// runLatReadDuration is run_iter_lat in duration mode (ib_read_lat's and
// ib_atomic_lat's client): one operation at a time until the end,
// counting those that complete while the clock samples.
func (s *session) runLatReadDuration(size uint64) (pt.LatDurStats, error) {
	q := s.qps[0]
	clock := s.newClock(time.Now())
	ctx, cancel := s.until(&clock)
	defer cancel()
	var scnt, counted uint64
	for !clock.ended(time.Now()) {
		scnt++
		wr := s.opWR(0, s.mr.Addr(), s.remote[0].VAddr, size)
		wr.Flags = stack.SendSignaled
		if err := q.PostSend(wr); err != nil {
			return pt.LatDurStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		if past, err := s.sendDone(ctx, scnt, scnt); past {
			break
		} else if err != nil {
			return pt.LatDurStats{}, err
		}
		if clock.sampling(time.Now()) {
			counted++
		}
	}
	return pt.MeasureLatDuration(size, counted, clock.sample(), 1), nil
}

// runLatSendDuration is run_iter_lat_send in duration mode: the
// ping-pong of runLatSend (the client first), each side's clock started
// by its first receive, every receive reposted, counting the receives
// while the clock samples.
func (s *session) runLatSendDuration(size uint64) (pt.LatDurStats, error) {
	cfg := &s.cfg
	q := s.qps[0]
	cqMod := uint64(cfg.CQMod)
	var clock durClock
	started := false
	ctx := s.ctx
	cancel := func() {}
	defer func() { cancel() }()
	var scnt, rcnt, counted uint64
	for !(started && clock.ended(time.Now())) {
		if !(scnt < 1 && cfg.Client) {
			wc, err := s.pollOne(ctx, s.recvCQ)
			if s.past(ctx, err) {
				break
			}
			if err != nil {
				return pt.LatDurStats{}, err
			}
			now := time.Now()
			if !started {
				// set_on_first_rx_packet
				clock, started = s.newClock(now), true
				ctx, cancel = s.until(&clock)
			}
			if wc.Status != stack.WCSuccess {
				return pt.LatDurStats{}, s.recvFailed(&wc, rcnt)
			}
			rcnt++
			if clock.sampling(now) {
				counted++
			}
			if err := q.PostRecv(s.recvWRAt(0, s.recvBase(0), size)); err != nil {
				return pt.LatDurStats{}, fmt.Errorf("couldn't post recv: rcnt=%d: %w", rcnt, err)
			}
		}
		if started && clock.ended(time.Now()) {
			break
		}
		scnt++
		wr := s.opWR(0, s.mr.Addr(), 0, size)
		signaled := scnt%cqMod == 0
		if signaled {
			wr.Flags = stack.SendSignaled
		}
		if err := q.PostSend(wr); err != nil {
			return pt.LatDurStats{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		if signaled {
			if past, err := s.sendDone(ctx, scnt, scnt); past {
				break
			} else if err != nil {
				return pt.LatDurStats{}, err
			}
		}
	}
	return pt.MeasureLatDuration(size, counted, clock.sample(), 2), nil
}

// sendDone waits for the completion of the send posted as scnt (ccnt the
// count perftest names when it fails): past reports that the duration
// ended while it waited.
func (s *session) sendDone(ctx context.Context, scnt, ccnt uint64) (past bool, err error) {
	wc, err := s.pollOne(ctx, s.sendCQ)
	if s.past(ctx, err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if wc.Status != stack.WCSuccess {
		return false, s.sendFailed(&wc, scnt, ccnt)
	}
	return false, nil
}
