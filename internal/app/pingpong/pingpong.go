package pingpong

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	pp "github.com/uroce/uroce/internal/oob/pingpong"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// The work request IDs the tools use.
const (
	recvWRID = 1
	sendWRID = 2
)

// Defaults of the stock tools.
const (
	DefaultSize   = 4096 // rc, uc, srq
	DefaultSizeUD = 1024 // ud (its usage text says 2048; the code uses 1024)
	DefaultIters  = 1000
	DefaultRx     = 500
	DefaultMTU    = 1024
	DefaultNumQP  = 16 // srq
	// MaxQP is ibv_srq_pingpong's QP table size; -q must stay below it.
	MaxQP = pp.SRQMessages
	// QKey is the Q_Key of ibv_ud_pingpong.
	QKey = 0x11111111
	// grhSize is the GRH slot ahead of UD receive data.
	grhSize = 40
	// pageSize is the page the -c check marks (sysconf(_SC_PAGESIZE)).
	pageSize = 4096
)

// Linger is how long rc and srq keep their QPs after the last exchange:
// four of the peer's ACK timeouts (timeout 14 is 67 ms).
const Linger = 300 * time.Millisecond

// AutoGID asks Run to pick the device's first IPv4 GID.
const AutoGID = -1

// Config selects the tool and its options. Zero values take the stock
// defaults.
type Config struct {
	Tool     pp.Tool
	Size     int // -s
	Iters    int // -n
	RxDepth  int // -r
	MTU      int // -m, in bytes (rc, uc, srq)
	GIDIndex int // -g; AutoGID (-1) picks the first IPv4 GID
	NumQP    int // -q (srq)
	Check    bool
	// Verify checks every received message (see the package doc).
	Verify bool
	// InfiniteRetry gives retry_cnt 7 rdma_rxe's meaning (retry forever).
	InfiniteRetry bool
	// Client is true when a server name was given.
	Client bool
	// Connect opens the exchange connection: the server accepts one, the
	// client dials. It is called after the local addresses are printed.
	Connect func(ctx context.Context) (net.Conn, error)
	// Stdout and Stderr receive what the tool prints (nil: discarded).
	Stdout, Stderr io.Writer
}

// Result reports a finished run.
type Result struct {
	Local, Remote []pp.Dest
	Sent, Recvd   int
	Elapsed       time.Duration
	// BadMessages counts received messages that failed Verify.
	BadMessages int
	// BadPages counts pages the -c check found wrong (server).
	BadPages int
}

// ErrStatus is returned (wrapped) when a work completion fails; the
// message names the status as the tools print it.
var ErrStatus = errors.New("work completion failed")

// ErrBadData is returned (wrapped) when Verify or the -c check found
// wrong data.
var ErrBadData = errors.New("received data differs from what the peer sends")

func (c *Config) normalize() error {
	if c.Tool < pp.RC || c.Tool > pp.SRQ {
		return fmt.Errorf("unknown tool %d", int(c.Tool))
	}
	if c.Size == 0 {
		c.Size = DefaultSize
		if c.Tool == pp.UD {
			c.Size = DefaultSizeUD
		}
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
	}
	if c.RxDepth == 0 {
		c.RxDepth = DefaultRx
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.NumQP == 0 {
		c.NumQP = DefaultNumQP
	}
	if c.Tool != pp.SRQ {
		c.NumQP = 1
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	switch {
	case c.Size < 1 || c.Size > 1<<30:
		return fmt.Errorf("size %d: want 1 to %d", c.Size, 1<<30)
	case c.Iters < 1:
		return fmt.Errorf("iterations %d: want at least 1", c.Iters)
	case c.RxDepth < 2:
		// The tools refill at one outstanding receive: fewer than two
		// never leaves room for it.
		return fmt.Errorf("rx depth %d: want at least 2", c.RxDepth)
	case mtuEnum(c.MTU) == 0:
		return fmt.Errorf("mtu %d: want 256, 512, 1024, 2048 or 4096", c.MTU)
	case c.Connect == nil:
		return errors.New("no connect function")
	}
	if c.Tool == pp.SRQ {
		if c.NumQP > c.RxDepth {
			return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", c.RxDepth, c.NumQP)
		}
		if c.NumQP < 1 || c.NumQP >= MaxQP {
			return fmt.Errorf("num_qp %d must be less than %d", c.NumQP, MaxQP-1)
		}
	}
	return nil
}

func mtuEnum(n int) verbs.MTU {
	for m := stack.MTU256; m <= stack.MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// session holds one run's verbs objects.
type session struct {
	cfg    Config
	dev    verbs.Device
	pd     verbs.PD
	buf    []byte // from dev.AllocBuffer
	mr     verbs.MR
	cq     verbs.CQ
	srq    verbs.SRQ
	qps    []verbs.QP
	ah     verbs.AH
	gidIdx int
	local  []pp.Dest
	remote []pp.Dest
	// pattern is what every received message must hold (Verify).
	pattern []byte
	// The work requests posted, kept here so that posting them through
	// the interfaces allocates nothing.
	recvWR         verbs.RecvWR
	sendWR         verbs.SendWR
	recvSG, sendSG [1]verbs.SGE
}

// Run runs the configured tool on dev and returns what happened. Errors
// carry the stock tool's message where it has one; Run also prints the
// "Failed status" line for a failed completion to Stderr, as the tools do.
func Run(ctx context.Context, dev verbs.Device, cfg Config) (Result, error) {
	var res Result
	if err := cfg.normalize(); err != nil {
		return res, err
	}
	s := &session{cfg: cfg, dev: dev}
	defer s.close()
	if err := s.setup(); err != nil {
		return res, err
	}
	for _, d := range s.local {
		io.WriteString(cfg.Stdout, pp.LocalAddressLine(cfg.Tool, d))
	}
	res.Local = s.local

	conn, err := cfg.Connect(ctx)
	if err != nil {
		return res, fmt.Errorf("couldn't connect: %w", err)
	}
	count := cfg.Tool.Messages()
	if cfg.Client {
		s.remote, err = pp.Client(ctx, conn, s.local, count)
	} else {
		s.remote, err = pp.Server(ctx, conn, s.local, count, func(remote []pp.Dest) error {
			return s.connect(remote)
		})
	}
	conn.Close()
	if err != nil {
		return res, err
	}
	s.remote = s.remote[:cfg.NumQP]
	res.Remote = s.remote
	for _, d := range s.remote {
		io.WriteString(cfg.Stdout, pp.RemoteAddressLine(d))
	}
	if cfg.Client {
		if err := s.connect(s.remote); err != nil {
			return res, err
		}
	}
	if cfg.Tool == pp.SRQ {
		err = s.loopSRQ(ctx, &res)
	} else {
		err = s.loop(ctx, &res)
	}
	if err != nil {
		return res, err
	}
	io.WriteString(cfg.Stdout, pp.ResultLines(cfg.Size, cfg.Iters, res.Elapsed))
	if cfg.Tool == pp.RC || cfg.Tool == pp.SRQ {
		// The peer may still wait for the ACK of its last message (the
		// rc client's last event is the server's last message; with
		// srq either side may end on a receive): answer its retries if
		// that ACK is lost, where the stock tools vanish.
		t := time.NewTimer(Linger)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if !cfg.Client && cfg.Check {
		// Late messages (srq's clients may send a few beyond -n) must
		// not land while the buffer is read: no engine touches it once
		// the QPs are destroyed.
		for _, q := range s.qps {
			q.Destroy()
		}
		off := s.dataOffset()
		for i := 0; i < cfg.Size; i += pageSize {
			if s.buf[off+i] != 0 {
				fmt.Fprintf(cfg.Stdout, "invalid data in page %d\n", i/pageSize)
				res.BadPages++
			}
		}
	}
	if res.BadMessages > 0 || res.BadPages > 0 {
		return res, fmt.Errorf("%w: %d messages, %d pages", ErrBadData, res.BadMessages, res.BadPages)
	}
	return res, nil
}

// dataOffset is where message data starts in the buffer.
func (s *session) dataOffset() int {
	if s.cfg.Tool == pp.UD {
		return grhSize
	}
	return 0
}

func (s *session) setup() error {
	cfg := &s.cfg
	attr := s.dev.Query()
	if cfg.Tool == pp.UD && cfg.Size > attr.ActiveMTU.Bytes() {
		return fmt.Errorf("Requested size larger than port MTU (%d)", attr.ActiveMTU.Bytes())
	}
	s.gidIdx = cfg.GIDIndex
	if s.gidIdx == AutoGID {
		s.gidIdx = firstIPv4GID(s.dev)
		if s.gidIdx < 0 {
			return errors.New("the device has no IPv4 GID: give -g")
		}
	}
	gid, err := s.dev.GID(s.gidIdx)
	if err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", s.gidIdx, err)
	}

	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	n := cfg.Size + s.dataOffset()
	if s.buf, err = s.dev.AllocBuffer(n); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	fill := byte(0x7b)
	if cfg.Tool == pp.SRQ {
		fill = 0
	}
	for i := range s.buf {
		s.buf[i] = fill
	}
	s.pattern = make([]byte, cfg.Size)
	for i := range s.pattern {
		s.pattern[i] = fill
	}
	if cfg.Check {
		for i := 0; i < cfg.Size; i += pageSize {
			s.pattern[i] = 0
		}
	}
	if s.mr, err = s.pd.RegisterMR(s.buf, stack.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	cqe := cfg.RxDepth + 1
	if cfg.Tool == pp.SRQ {
		cqe = cfg.RxDepth + cfg.NumQP
	}
	if s.cq, err = s.dev.CreateCQ(cqe); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	typ := stack.RC
	switch cfg.Tool {
	case pp.UC:
		typ = stack.UC
	case pp.UD:
		typ = stack.UD
	}
	init := verbs.QPInit{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 1, MaxRecvWR: cfg.RxDepth,
		InfiniteRetry7: cfg.InfiniteRetry}
	if cfg.Tool == pp.SRQ {
		if s.srq, err = s.pd.CreateSRQ(verbs.SRQInit{MaxWR: cfg.RxDepth, MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
		init.SRQ = s.srq
	}
	for i := 0; i < cfg.NumQP; i++ {
		q, err := s.pd.CreateQP(init)
		if err != nil {
			return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		s.qps = append(s.qps, q)
		ia := verbs.InitAttr{}
		if typ == stack.UD {
			ia.QKey = QKey
		}
		if err := q.ToInit(ia); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err)
		}
	}
	if got := s.postRecv(cfg.RxDepth); got < cfg.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", got)
	}
	for _, q := range s.qps {
		s.local = append(s.local, pp.Dest{QPN: q.QPN(), PSN: randPSN(), GID: gid.As16()})
	}
	return nil
}

func firstIPv4GID(dev verbs.Device) int {
	for i, g := range dev.GIDs() {
		if g.Is4In6() {
			return i
		}
	}
	return -1
}

func randPSN() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xffffff
}

// postRecv posts n receives covering the whole buffer, to the QP or the
// SRQ, and returns how many were posted.
func (s *session) postRecv(n int) int {
	s.recvSG[0] = s.mr.SGE(0, uint32(len(s.buf)))
	s.recvWR = verbs.RecvWR{ID: recvWRID, SG: s.recvSG[:]}
	for i := 0; i < n; i++ {
		var err error
		if s.srq != nil {
			err = s.srq.PostRecv(&s.recvWR)
		} else {
			err = s.qps[0].PostRecv(&s.recvWR)
		}
		if err != nil {
			return i
		}
	}
	return n
}

func (s *session) postSend(q verbs.QP) error {
	off := s.dataOffset()
	s.sendSG[0] = s.mr.SGE(uint64(off), uint32(s.cfg.Size))
	wr := &s.sendWR
	*wr = verbs.SendWR{ID: sendWRID, Op: stack.OpSend, Flags: stack.SendSignaled, SG: s.sendSG[:]}
	if s.ah != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.remote[0].QPN, QKey
	}
	if err := q.PostSend(wr); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// connect moves the QPs to RTR and RTS with the peer's addresses (and
// creates the UD address handle), as the tools' pp_connect_ctx does.
func (s *session) connect(remote []pp.Dest) error {
	cfg := &s.cfg
	if len(remote) < cfg.NumQP {
		return fmt.Errorf("%d remote addresses for %d QPs", len(remote), cfg.NumQP)
	}
	// ibv_srq_pingpong takes the GID of the first address for every QP.
	rgid := netip.AddrFrom16(remote[0].GID)
	if binary.BigEndian.Uint64(remote[0].GID[8:]) == 0 {
		return fmt.Errorf("remote GID %v has no interface ID: RoCE needs the peer to give -g", rgid)
	}
	ah := verbs.AHAttr{DGID: rgid, SGIDIndex: s.gidIdx}
	for i, q := range s.qps {
		var rtr verbs.RTRAttr
		var rts verbs.RTSAttr
		switch cfg.Tool {
		case pp.RC, pp.SRQ:
			rtr = verbs.RTRAttr{DestQPN: remote[i].QPN, AH: ah, RQPSN: verbs.PSN(remote[i].PSN),
				PathMTU: mtuEnum(cfg.MTU), MaxDestRdAtomic: 1, MinRNRTimer: 12}
			rts = verbs.RTSAttr{SQPSN: verbs.PSN(s.local[i].PSN), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
		case pp.UC:
			rtr = verbs.RTRAttr{DestQPN: remote[i].QPN, AH: ah, RQPSN: verbs.PSN(remote[i].PSN), PathMTU: mtuEnum(cfg.MTU)}
			rts = verbs.RTSAttr{SQPSN: verbs.PSN(s.local[i].PSN)}
		case pp.UD:
			rts = verbs.RTSAttr{SQPSN: verbs.PSN(s.local[i].PSN)}
		}
		if err := q.ToRTR(rtr); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %w", err)
		}
		if err := q.ToRTS(rts); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %w", err)
		}
	}
	if cfg.Tool == pp.UD {
		a, err := s.pd.CreateAH(ah)
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		s.ah = a
	}
	return nil
}

// failed reports a failed completion the way the tools do. rcnt is the
// number of messages received so far.
func (s *session) failed(wc *verbs.WC, rcnt int) error {
	fmt.Fprintf(s.cfg.Stderr, "Failed status %s (%d) for wr_id %d\n", wc.Status, int(wc.Status), int(wc.ID))
	err := fmt.Errorf("%w: %s (%d) for wr_id %d", ErrStatus, wc.Status, int(wc.Status), int(wc.ID))
	if wc.ID == sendWRID && wc.Status == stack.WCRetryExcErr && rcnt >= s.cfg.Iters {
		// Every message of the peer arrived: the peer is done and,
		// like the stock tools, left without waiting for our last
		// message's ACK to reach us.
		err = fmt.Errorf("%w (%s)", err, PeerLeftHint)
	}
	return err
}

// PeerLeftHint explains a retry failure of the last send after the
// peer's last message arrived.
const PeerLeftHint = "all the peer's messages arrived: the peer may have left before the ACK of our last one reached us"

// checkRecv verifies a received message when Verify is on. It is called
// after the receive completed and before anything else writes the buffer.
func (s *session) checkRecv(wc *verbs.WC, res *Result) {
	if !s.cfg.Verify {
		return
	}
	off := s.dataOffset()
	if int(wc.ByteLen) != s.cfg.Size+off {
		res.BadMessages++
		return
	}
	got := s.buf[off : off+s.cfg.Size]
	for i := range got {
		if got[i] != s.pattern[i] {
			res.BadMessages++
			return
		}
	}
}

// wait blocks until the CQ has completions and polls up to len(wcs).
func (s *session) wait(ctx context.Context, wcs []verbs.WC) (int, error) {
	for {
		if n := s.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := s.cq.Wait(ctx); err != nil {
			return 0, fmt.Errorf("poll CQ failed: %w", err)
		}
	}
}

// loop is the completion loop of ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_ud_pingpong.
func (s *session) loop(ctx context.Context, res *Result) error {
	cfg := &s.cfg
	q := s.qps[0]
	routs := cfg.RxDepth
	pending := recvWRID
	if cfg.Client {
		if cfg.Check {
			off := s.dataOffset()
			for i := 0; i < cfg.Size; i += pageSize {
				s.buf[off+i] = 0
			}
		}
		if err := s.postSend(q); err != nil {
			return err
		}
		pending |= sendWRID
	}
	start := time.Now()
	scnt, rcnt := 0, 0
	var wcs [2]verbs.WC
	for rcnt < cfg.Iters || scnt < cfg.Iters {
		n, err := s.wait(ctx, wcs[:])
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			wc := &wcs[i]
			if wc.Status != stack.WCSuccess {
				return s.failed(wc, rcnt)
			}
			switch wc.ID {
			case sendWRID:
				scnt++
			case recvWRID:
				s.checkRecv(wc, res)
				routs--
				if routs <= 1 {
					routs += s.postRecv(cfg.RxDepth - routs)
					if routs < cfg.RxDepth {
						return fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", int(wc.ID))
			}
			pending &^= int(wc.ID)
			if scnt < cfg.Iters && pending == 0 {
				if err := s.postSend(q); err != nil {
					return err
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Sent, res.Recvd = scnt, rcnt
	return nil
}

// loopSRQ is the completion loop of ibv_srq_pingpong: one pending mask
// per QP, one receive pool.
func (s *session) loopSRQ(ctx context.Context, res *Result) error {
	cfg := &s.cfg
	pending := make([]int, len(s.qps))
	if cfg.Client {
		for i, q := range s.qps {
			if err := s.postSend(q); err != nil {
				return err
			}
			pending[i] = sendWRID | recvWRID
		}
	} else {
		for i := range pending {
			pending[i] = recvWRID
		}
	}
	index := make(map[uint32]int, len(s.qps))
	for i, q := range s.qps {
		index[q.QPN()] = i
	}
	routs := cfg.RxDepth
	start := time.Now()
	scnt, rcnt := 0, 0
	wcs := make([]verbs.WC, cfg.NumQP+cfg.RxDepth)
	for rcnt < cfg.Iters || scnt < cfg.Iters {
		n, err := s.wait(ctx, wcs)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			wc := &wcs[i]
			if wc.Status != stack.WCSuccess {
				return s.failed(wc, rcnt)
			}
			qi, ok := index[wc.QPN]
			if !ok {
				return fmt.Errorf("couldn't find QPN %06x", wc.QPN)
			}
			switch wc.ID {
			case sendWRID:
				scnt++
			case recvWRID:
				if len(s.qps) == 1 {
					// With several QPs messages land in the one
					// buffer concurrently: only one can be checked.
					s.checkRecv(wc, res)
				}
				routs--
				if routs <= cfg.NumQP {
					routs += s.postRecv(cfg.RxDepth - routs)
					if routs < cfg.RxDepth {
						return fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", int(wc.ID))
			}
			pending[qi] &^= int(wc.ID)
			if scnt < cfg.Iters && pending[qi] == 0 {
				if err := s.postSend(s.qps[qi]); err != nil {
					return err
				}
				pending[qi] = recvWRID | sendWRID
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Sent, res.Recvd = scnt, rcnt
	return nil
}

// close destroys what setup created; once the QPs are destroyed no
// engine touches the buffer, and once its region is deregistered it goes
// back to the device.
func (s *session) close() {
	for _, q := range s.qps {
		q.Destroy()
	}
	if s.ah != nil {
		s.ah.Destroy()
	}
	if s.srq != nil {
		s.srq.Destroy()
	}
	if s.cq != nil {
		s.cq.Destroy()
	}
	if s.mr != nil {
		s.mr.Deregister()
	}
	if s.buf != nil {
		s.dev.FreeBuffer(s.buf)
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
}
