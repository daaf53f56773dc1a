package perftest

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	pt "github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// Result reports a finished run.
type Result struct {
	Agreed pt.Agreed
	Local  []pt.Dest
	Remote []pt.Dest
	// Reports are this side's bandwidth figures per run (bw tools, where
	// this side measures); RemoteReport is the client's, as a server of
	// ib_write_bw, ib_read_bw and ib_atomic_bw receives it.
	Reports      []pt.Report
	RemoteReport *pt.Report
	// RemoteReports are the peer's reports per run (-b).
	RemoteReports []pt.Report
	// Lat are this side's latency figures per run (lat tools), LatDur
	// in duration mode (-D).
	Lat    []pt.LatStats
	LatDur []pt.LatDurStats
}

// ErrCompletion is returned (wrapped) when a work completion fails.
var ErrCompletion = errors.New("completion with error")

// session holds one run's verbs objects.
type session struct {
	// belowBW and belowMsgRate: a report fell short of -w or -y.
	belowBW, belowMsgRate bool

	ctx    context.Context // of Run: the hooks take none
	cfg    Config
	dev    verbs.Device
	sdev   *stack.Device // the in-process device (-R)
	agreed pt.Agreed
	gidIdx int
	gid    netip.Addr

	pd     verbs.PD
	buf    []byte // from dev.AllocBuffer
	mr     verbs.MR
	sendCQ verbs.CQ
	recvCQ verbs.CQ
	qps    []verbs.QP
	ahs    []verbs.AH // UD: the peer's QP i, where this side sends
	local  []pt.Dest
	remote []pt.Dest
	// cmConns are the test QPs' rdma_cm connections (-R).
	cmConns []*rdmacm.Conn

	cycle     uint32 // agreed cycle buffer
	cacheLine uint32 // agreed cache line size
	buffSize  uint64 // BUFF_SIZE of the allocation size
	halfSize  uint64 // INC(BUFF_SIZE): one QP's send (or receive) area
	outReads  int
	res       *Result
	initial   []byte // the buffer before the test (Verify)
	start     time.Time
	waitEnd   time.Time // duration mode: waitByte gives up then
	wcs       []verbs.WC
	// The work requests posted, kept here so that posting them through
	// the interfaces allocates nothing.
	sendWR         verbs.SendWR
	recvWR         verbs.RecvWR
	sendSG, recvSG [1]verbs.SGE
}

// now returns nanoseconds since the session started.
func (s *session) now() int64 { return int64(time.Since(s.start)) }

// Run runs the configured tool on dev and returns what happened. It prints
// what the stock tool prints to Stdout, and its error messages to Stderr.
func Run(ctx context.Context, dev verbs.Device, cfg Config) (*Result, error) {
	res := &Result{}
	if err := cfg.normalize(); err != nil {
		return res, err
	}
	s := &session{ctx: ctx, cfg: cfg, dev: dev, res: res, start: time.Now()}
	defer s.close()
	out := cfg.Stdout
	if !cfg.Client {
		io.WriteString(out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	if err := s.pickGID(); err != nil {
		return res, err
	}
	var conn net.Conn
	if cfg.RDMACM {
		sd, ok := verbs.StackDevice(dev)
		if !ok {
			return res, fmt.Errorf("-R (rdma_cm): %w with a daemon's device; run uroce perf without --daemon", ErrUnsupported)
		}
		s.sdev = sd
		cc, err := openCMConn(ctx, sd, cfg.Client, cfg.CMAddr, cfg.ConnectWait)
		if err != nil {
			return res, fmt.Errorf("unable to perform rdma_cm connection: %w", err)
		}
		defer cc.Close()
		// The test QPs disconnect before the exchange connection does.
		defer s.cmDisconnect()
		conn = cc
	} else {
		c, err := cfg.Connect(ctx)
		if err != nil {
			return res, fmt.Errorf("unable to init the socket connection: %w", err)
		}
		defer c.Close()
		conn = c
	}

	role := pt.Server
	if cfg.Client {
		role = pt.Client
	}
	seq := pt.Config{Tool: cfg.Tool, Role: role, QPs: cfg.QPs, Runs: len(cfg.sizes), All: cfg.All, CM: cfg.RDMACM,
		Duplex: cfg.Duplex, Duration: cfg.Duration > 0}
	params := pt.Params{MTU: s.portMTU()}
	hooks := pt.Hooks{
		Agreed:    s.agree,
		Reported:  s.reported,
		Local:     s.setup,
		CMConnect: s.cmConnect,
		Connect:   s.connect,
		Prepare:   s.prepare,
		Run:       s.run,
		Report: func() pt.Report {
			if len(res.Reports) > 0 {
				return res.Reports[len(res.Reports)-1]
			}
			return pt.Report{}
		},
	}
	r, err := pt.Run(ctx, conn, seq, params, hooks)
	res.Agreed = r.Agreed
	if err != nil {
		return res, err
	}
	if cfg.Tool == pt.WriteLat && !cfg.RDMACM {
		lingerUntilPeerDone(ctx, conn)
	}
	if cfg.Verify {
		if err := s.verifyAtomics(); err != nil {
			return res, err
		}
	}
	if r.HasReport && !cfg.Client && !cfg.Duplex {
		rep := r.RemoteReport
		res.RemoteReport = &rep
		io.WriteString(out, pt.BWLine(rep, cfg.Gbits))
		s.verifyLimits(rep)
	}
	io.WriteString(out, pt.ResultLine)
	switch {
	case cfg.LimitBWOn && s.belowBW:
		fmt.Fprintln(cfg.Stderr, "Error: BW result is below bw limit")
		return res, ErrBelowLimit
	case cfg.LimitBWOn && s.belowMsgRate:
		fmt.Fprintln(cfg.Stderr, "Error: Msg rate  is below msg_rate limit")
		return res, ErrBelowLimit
	}
	return res, nil
}

// ErrBelowLimit is a bandwidth test's result below its -w or -y limit.
var ErrBelowLimit = errors.New("result below the limit")

// verifyLimits takes note of a reported result below the -w or -y limit
// (perftest's verifier).
func (s *session) verifyLimits(rep pt.Report) {
	if s.cfg.LimitBWOn && rep.BWAvg < s.cfg.LimitBW {
		s.belowBW = true
	}
	if s.cfg.LimitMsgRateOn && rep.MsgRate < s.cfg.LimitMsgRate {
		s.belowMsgRate = true
	}
}

// lingerTime bounds how long a finished side waits for its peer.
const lingerTime = 3 * time.Second

// lingerUntilPeerDone keeps the QPs alive until the peer has closed the
// exchange connection, at most lingerTime. ib_write_lat has no closing
// exchange: a side that saw its last completion may still owe the peer the
// ACK of the peer's last WRITE, and if that ACK was lost the peer resends
// it and needs an answer. The stock tools close at once and leave the peer
// retrying into a destroyed QP; half-closing and waiting for the peer's
// close costs nothing when both finish together.
func lingerUntilPeerDone(ctx context.Context, conn net.Conn) {
	if tc, ok := conn.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
	}
	dl := time.Now().Add(lingerTime)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	conn.SetReadDeadline(dl)
	var b [64]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return
		}
	}
}

// portMTU is the MTU this side advertises: -m, capped by the port's
// active MTU as perftest's set_mtu does.
func (s *session) portMTU() pt.MTU {
	active := pt.MTU(s.dev.Query().ActiveMTU)
	if s.cfg.MTU == 0 {
		return active
	}
	m := pt.MTUFromBytes(s.cfg.MTU)
	if m > active {
		fmt.Fprintf(s.cfg.Stdout, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", int(active))
		return active
	}
	return m
}

func (s *session) pickGID() error {
	s.gidIdx = s.cfg.GIDIndex
	if s.gidIdx == AutoGID {
		s.gidIdx = -1
		for i, g := range s.dev.GIDs() {
			if g.Is4In6() {
				s.gidIdx = i
				break
			}
		}
		if s.gidIdx < 0 {
			s.gidIdx = 0
		}
	}
	g, err := s.dev.GID(s.gidIdx)
	if err != nil {
		return fmt.Errorf("gid index %d: %w", s.gidIdx, err)
	}
	s.gid = g
	return nil
}

// agree is the Agreed hook, check_mtu's part: over UD a message is at
// most the agreed MTU. A larger -s is refused; the default size and
// -a's sizes are cut to it. It returns the number of runs.
func (s *session) agree(a pt.Agreed) (int, error) {
	cfg := &s.cfg
	mtu := uint64(a.MTU.Bytes())
	if !cfg.UD || cfg.Size <= mtu {
		return 0, nil
	}
	if cfg.sizeSet && !cfg.All {
		io.WriteString(cfg.Stderr, " Max message size in UD cannot be greater than MTU \n")
		return 0, fmt.Errorf("message size %d: larger than the MTU (%d) over UD", cfg.Size, mtu)
	}
	fmt.Fprintf(cfg.Stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
	cfg.Size = mtu
	cfg.sizes = []uint64{mtu}
	if cfg.All {
		cfg.sizes = nil
		for _, sz := range pt.AllSizes() {
			if sz <= mtu {
				cfg.sizes = append(cfg.sizes, sz)
			}
		}
	}
	return len(cfg.sizes), nil
}

// reported is the Reported hook (-b): the line of run r, with this
// side's iterations and both sides' rates summed (print_full_bw_report
// with the peer's report).
func (s *session) reported(r int, remote pt.Report) error {
	cfg := &s.cfg
	s.res.RemoteReports = append(s.res.RemoteReports, remote)
	if r >= len(s.res.Reports) {
		return fmt.Errorf("report of run %d before the run", r)
	}
	sum := s.res.Reports[r]
	sum.BWPeak += remote.BWPeak
	sum.BWAvg += remote.BWAvg
	sum.MsgRate += remote.MsgRate
	io.WriteString(cfg.Stdout, pt.BWLine(sum, cfg.Gbits))
	s.verifyLimits(sum)
	return nil
}

// setup is the Local hook: the resources (unless cmConnect made them),
// then the test information block.
func (s *session) setup(a pt.Agreed) ([]pt.Dest, error) {
	cfg := &s.cfg
	if !cfg.RDMACM {
		if err := s.resources(a); err != nil {
			return nil, err
		}
	}
	io.WriteString(cfg.Stdout, s.testInfo().String())
	if cfg.Verify {
		s.initial = append([]byte(nil), s.buf...)
	}
	return s.local, nil
}

// resources makes the buffer, MR, CQs and QPs (alloc_ctx, ctx_init,
// set_up_connection) and the local keys.
func (s *session) resources(a pt.Agreed) error {
	cfg := &s.cfg
	s.agreed = a
	s.cycle, s.cacheLine = a.CycleBuffer, a.CacheLineSize
	if s.cycle == 0 || s.cycle > 1<<24 || s.cacheLine == 0 || s.cacheLine > 1<<16 {
		return fmt.Errorf("peer's cycle buffer %d or cache line %d is unusable", s.cycle, s.cacheLine)
	}
	verb := cfg.verb()
	s.buffSize = bufSize(cfg.Size, s.cycle)
	s.halfSize = inc(s.buffSize, s.cacheLine)
	total := s.halfSize * 2 * uint64(cfg.QPs)
	if cfg.UD {
		// The last receive's GRH and message may end a cache line
		// past the last QP's area (see recvBase).
		total += uint64(s.cacheLine)
	}
	if total > 1<<34 {
		return fmt.Errorf("buffer of %d bytes is too large", total)
	}

	attr := s.dev.Query()
	s.outReads = 1
	if verb == pt.Read || verb == pt.Atomic {
		s.outReads = attr.MaxQPRdAtom
		if cfg.OutReads > 0 && cfg.OutReads < s.outReads {
			s.outReads = cfg.OutReads
		}
	}

	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if s.buf, err = s.dev.AllocBuffer(int(total)); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	if !(verb == pt.Write && !cfg.Tool.BW()) {
		// Random contents, as perftest fills every buffer but
		// ib_write_lat's.
		var seed [32]byte
		crand.Read(seed[:])
		rng := rand.NewChaCha8(seed)
		rng.Read(s.buf)
	}
	access := stack.AccessLocalWrite
	qpAccess := verbs.Access(0)
	switch verb {
	case pt.Write:
		access |= stack.AccessRemoteWrite
		qpAccess = stack.AccessRemoteWrite
	case pt.Read:
		access |= stack.AccessRemoteRead
		qpAccess = stack.AccessRemoteRead
	case pt.Atomic:
		access |= stack.AccessRemoteAtomic
		qpAccess = stack.AccessRemoteAtomic
	case pt.Send:
		qpAccess = stack.AccessRemoteWrite | stack.AccessLocalWrite
	}
	if s.mr, err = s.pd.RegisterMR(s.buf, access); err != nil {
		return fmt.Errorf("couldn't allocate MR: %w", err)
	}
	// ib_send_bw -b sends and receives at once: both complete on one
	// CQ here, so that one wait sees either.
	shared := verb != pt.Send || cfg.Duplex
	cqSize := cfg.TxDepth*cfg.QPs + 16
	if verb == pt.Send && shared {
		cqSize += cfg.RxDepth * cfg.QPs
	}
	if s.sendCQ, err = s.dev.CreateCQ(cqSize); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	s.recvCQ = s.sendCQ
	if !shared {
		if s.recvCQ, err = s.dev.CreateCQ(cfg.RxDepth*cfg.QPs + 16); err != nil {
			return fmt.Errorf("couldn't create a receiver CQ: %w", err)
		}
	}
	s.wcs = make([]verbs.WC, 16)
	for i := 0; i < cfg.QPs; i++ {
		typ := stack.RC
		switch {
		case cfg.UC:
			typ = stack.UC
		case cfg.UD:
			typ = stack.UD
		}
		q, err := s.pd.CreateQP(verbs.QPInit{Type: typ, SendCQ: s.sendCQ, RecvCQ: s.recvCQ,
			MaxSendWR: cfg.TxDepth, MaxRecvWR: cfg.RxDepth, MaxInline: cfg.Inline, InfiniteRetry7: cfg.InfiniteRetry})
		if err != nil {
			return fmt.Errorf("unable to create QP: %w", err)
		}
		s.qps = append(s.qps, q)
		init := verbs.InitAttr{AccessFlags: qpAccess}
		if cfg.UD {
			init = verbs.InitAttr{QKey: udQKey}
		}
		if err := q.ToInit(init); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %w", err)
		}
		rkey := s.mr.RKey()
		if cfg.BadRKey && !cfg.Client {
			rkey = badKey(rkey)
		}
		s.local = append(s.local, pt.Dest{
			OutReads: uint16(s.outReads),
			QPN:      q.QPN(),
			PSN:      randPSN(),
			RKey:     rkey,
			VAddr:    s.mr.Addr() + uint64(cfg.QPs+i)*s.buffSize,
			GID:      s.gid.As16(),
		})
	}
	s.res.Local = s.local
	if testHook != nil {
		testHook(s)
	}
	return nil
}

// testHook, when set by a test, sees each session once its resources
// exist.
var testHook func(*session)

// ErrVerify is returned (wrapped) when Verify finds wrong data.
var ErrVerify = errors.New("data check failed")

// verifyAtomics is the atomic server's Verify check: the client's
// FETCH_ADDs of 1 step through the cycle buffer, INC(8) bytes apart, so
// slot j of the remote area saw iters/slots additions, one more for the
// first iters%slots slots.
func (s *session) verifyAtomics() error {
	cfg := &s.cfg
	if cfg.Client && !cfg.Duplex || cfg.Tool != pt.AtomicBW || cfg.CmpSwap || cfg.QPs != 1 {
		return nil
	}
	step := inc(cfg.Size, s.cacheLine)
	slots := uint64(s.cycle) / step
	iters := uint64(cfg.Iters)
	base := s.buffSize
	bad := 0
	for j := uint64(0); j < slots; j++ {
		off := base + j*step
		want := iters / slots
		if j < iters%slots {
			want++
		}
		got := binary.NativeEndian.Uint64(s.buf[off:]) - binary.NativeEndian.Uint64(s.initial[off:])
		if got != want {
			if bad < 5 {
				fmt.Fprintf(cfg.Stderr, "uroce perf: verify: slot %d at offset %d grew by %d, want %d\n", j, off, got, want)
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d atomic slots", ErrVerify, bad, slots)
	}
	fmt.Fprintf(cfg.Stderr, "uroce perf: verify: %d additions in %d slots, each exactly once\n", iters, slots)
	return nil
}

// badKey returns a key that names no region: the same index with another
// key byte, so that it is not even a valid key of another region.
func badKey(k uint32) uint32 { return k ^ 0x5a }

func randPSN() uint32 {
	var b [4]byte
	crand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xffffff
}

func (s *session) testInfo() pt.TestInfo {
	cfg := &s.cfg
	role := pt.Server
	if cfg.Client {
		role = pt.Client
	}
	at := "FETCH_AND_ADD"
	if cfg.CmpSwap {
		at = "CMP_AND_SWAP"
	}
	conn := "RC"
	switch {
	case cfg.UC:
		conn = "UC"
	case cfg.UD:
		conn = "UD"
	}
	return pt.TestInfo{
		Tool: cfg.Tool, Role: role, AtomicType: at, Device: cfg.Device, QPs: cfg.QPs,
		Transport: "IB", Connection: conn, PCIeRelaxOrder: "Unsupported",
		TxDepth: cfg.TxDepth, RxDepth: cfg.RxDepth, PostList: cfg.PostList, CQMod: cfg.CQMod, InlineSize: cfg.Inline,
		MTU: s.agreed.MTU, LinkType: "Ethernet", GIDIndex: s.gidIdx, OutReads: s.outReads,
		RDMACM: cfg.RDMACM, Duplex: cfg.Duplex,
	}
}

// connect is the Connect hook (ctx_connect): RTR for every QP, RTS for
// the client and for the latency tests, then the address lines.
func (s *session) connect(remote []pt.Dest) error {
	cfg := &s.cfg
	s.remote = remote
	s.res.Remote = remote
	if cfg.RDMACM {
		// rdma_cm has connected the QPs.
		s.printAddresses(remote)
		return nil
	}
	if s.gid.Is4In6() != netip.AddrFrom16(remote[0].GID).Is4In6() {
		return errors.New("found incompatibility issue with GID types: try a different IP version")
	}
	rnr := uint8(7)
	if cfg.SetRNRRetry {
		rnr = cfg.RNRRetry
	}
	// The one-way bandwidth servers stay in RTR: they only receive.
	sends := cfg.Client || !cfg.Tool.BW() || cfg.Duplex
	if cfg.UD {
		if err := s.connectUD(remote, sends); err != nil {
			return err
		}
		s.printAddresses(remote)
		return nil
	}
	for i, q := range s.qps {
		r := remote[i]
		rtr := verbs.RTRAttr{
			DestQPN: r.QPN, AH: verbs.AHAttr{DGID: netip.AddrFrom16(r.GID), SGIDIndex: s.gidIdx},
			RQPSN: verbs.PSN(r.PSN), PathMTU: verbs.MTU(s.agreed.MTU),
			MaxDestRdAtomic: uint8(s.outReads), MinRNRTimer: minRNRTimer,
		}
		if err := q.ToRTR(rtr); err != nil {
			return fmt.Errorf("failed to modify QP %d to RTR: %w", q.QPN(), err)
		}
		if sends {
			maxRd := min(int(r.OutReads), s.dev.Query().MaxQPInitRdAtom)
			rts := verbs.RTSAttr{SQPSN: verbs.PSN(s.local[i].PSN), Timeout: uint8(cfg.QPTimeout),
				RetryCnt: 7, RNRRetry: rnr, MaxRdAtomic: uint8(maxRd)}
			if err := q.ToRTS(rts); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %w", err)
			}
		}
	}
	s.printAddresses(remote)
	return nil
}

// connectUD readies UD QPs as ctx_connect does: RTR, then where the side
// sends RTS with its PSN and an address handle for the peer's GID (hop
// limit 255, the local GID index); the peer's QPN and perftest's Q_Key
// go in every work request (opWR).
func (s *session) connectUD(remote []pt.Dest, sends bool) error {
	if sends {
		s.ahs = make([]verbs.AH, len(s.qps))
	}
	for i, q := range s.qps {
		if err := q.ToRTR(verbs.RTRAttr{}); err != nil {
			return fmt.Errorf("failed to modify QP %d to RTR: %w", q.QPN(), err)
		}
		if !sends {
			continue
		}
		if err := q.ToRTS(verbs.RTSAttr{SQPSN: verbs.PSN(s.local[i].PSN)}); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %w", err)
		}
		ah, err := s.pd.CreateAH(verbs.AHAttr{DGID: netip.AddrFrom16(remote[i].GID), SGIDIndex: s.gidIdx, HopLimit: 0xff})
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		s.ahs[i] = ah
	}
	return nil
}

// printAddresses prints both sides' address lines and the results header.
func (s *session) printAddresses(remote []pt.Dest) {
	cfg := &s.cfg
	verb := cfg.verb()
	if cfg.RDMACM {
		// perftest prints with its exchange's parameters, whose verb
		// is SEND over rdma_cm: no R_Key, VA or outstanding reads.
		verb = pt.Send
	}
	for _, d := range s.local {
		io.WriteString(cfg.Stdout, pt.AddressLines(false, verb, d, true))
	}
	for _, d := range remote {
		io.WriteString(cfg.Stdout, pt.AddressLines(true, verb, d, true))
	}
	switch {
	case cfg.Tool.BW():
		io.WriteString(cfg.Stdout, pt.ResultLine+pt.BWHeader(cfg.Gbits))
	case cfg.Tool != pt.ReadLat && cfg.Tool != pt.AtomicLat || cfg.Client:
		// ib_read_lat's and ib_atomic_lat's servers print no header:
		// they only wait.
		header := pt.LatHeader()
		if cfg.Duration > 0 {
			header = pt.LatDurHeader()
		}
		io.WriteString(cfg.Stdout, pt.ResultLine+header)
	}
}

// prepare is the Prepare hook: the send tools post their receives
// (ctx_set_recv_wqes) where the side receives.
func (s *session) prepare(r int) error {
	cfg := &s.cfg
	if cfg.verb() != pt.Send || (cfg.Tool.BW() && cfg.Client && !cfg.Duplex) {
		return nil
	}
	if cfg.LateRecv > 0 && cfg.Tool == pt.SendBW {
		return nil // runBWServer posts them
	}
	return s.postRecvs(r)
}

// postRecvs posts rx_depth receives per QP for run r.
func (s *session) postRecvs(r int) error {
	cfg := &s.cfg
	size := cfg.sizes[r]
	for i, q := range s.qps {
		base := s.recvBase(i)
		addr := base
		for j := 0; j < cfg.RxDepth; j++ {
			if err := q.PostRecv(s.recvWRAt(i, addr, size)); err != nil {
				return fmt.Errorf("couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
			if cfg.Tool.BW() {
				addr = s.incLoc(addr, base, size, uint64(j))
			}
		}
	}
	return nil
}

// recvWRAt returns QP i's receive work request for a message of size
// bytes at addr (over UD with room for the GRH first). It is the
// session's one: post it before asking for another.
func (s *session) recvWRAt(i int, addr, size uint64) *verbs.RecvWR {
	if s.cfg.UD {
		size += udAddition
	}
	s.recvSG[0] = verbs.SGE{Addr: addr, Length: uint32(size), LKey: s.mr.LKey()}
	s.recvWR = verbs.RecvWR{ID: uint64(i), SG: s.recvSG[:]}
	return &s.recvWR
}

// recvBase is the first receive address of QP i: over UD 40 bytes short
// of a cache line into its area, so that the message after the GRH
// starts on the line, as ctx_set_recv_wqes places it.
func (s *session) recvBase(i int) uint64 {
	a := s.mr.Addr() + uint64(s.cfg.QPs+i)*s.halfSize
	if s.cfg.UD {
		a += uint64(s.cacheLine) - udAddition
	}
	return a
}

// incRecv steps a receive address for a repost as run_iter_bw_server
// and run_iter_bi do: as incLoc, but a UD server steps only while the
// message with its GRH fits in half a cycle buffer (perftest tests
// SIZE(UD, size, machine == SERVER) there).
func (s *session) incRecv(addr, base, size, cnt uint64) uint64 {
	if s.cfg.UD && !s.cfg.Client && size+udAddition > uint64(s.cycle)/2 {
		return addr
	}
	return s.incLoc(addr, base, size, cnt)
}

// incLoc and incRem step an address through the cycle buffer as
// increase_loc_addr and increase_rem_addr do (cnt is the count before the
// post), for messages up to half a cycle buffer.
func (s *session) incLoc(addr, base, size, cnt uint64) uint64 {
	if size > uint64(s.cycle)/2 {
		return addr
	}
	step := inc(size, s.cacheLine)
	addr += step
	if (cnt+1)%(uint64(s.cycle)/step) == 0 {
		addr = base
	}
	return addr
}

// run is the Run hook: measured run r.
func (s *session) run(r int) error {
	cfg := &s.cfg
	size := cfg.sizes[r]
	switch cfg.Tool {
	case pt.WriteBW, pt.ReadBW, pt.AtomicBW, pt.SendBW:
		var rep pt.Report
		var err error
		sender := cfg.Client || cfg.Duplex
		switch {
		case cfg.Duplex && cfg.Tool == pt.SendBW:
			rep, err = s.runBi(size)
		case sender && cfg.Duration > 0:
			rep, err = s.runBWDuration(size)
		case sender:
			rep, err = s.runBW(size)
		default:
			if cfg.LateRecv > 0 {
				time.Sleep(cfg.LateRecv)
				if err := s.postRecvs(r); err != nil {
					return err
				}
			}
			rep, err = s.runBWServer(size)
		}
		if err != nil {
			return err
		}
		s.res.Reports = append(s.res.Reports, rep)
		switch {
		case cfg.Duplex && !(cfg.Tool == pt.SendBW && cfg.Duration > 0):
			// reported prints the line with the peer's figures;
			// ib_send_bw -b -D exchanges none and prints its own.
		case cfg.Client || cfg.Tool == pt.SendBW:
			io.WriteString(cfg.Stdout, pt.BWLine(rep, cfg.Gbits))
			s.verifyLimits(rep)
		}
		return nil
	}
	if cfg.Duration > 0 {
		return s.runLatDuration(size)
	}
	var posted []int64
	var err error
	rtt := 2
	switch cfg.Tool {
	case pt.WriteLat:
		posted, err = s.runLatWrite(size)
	case pt.ReadLat, pt.AtomicLat:
		// run_iter_lat: one READ or atomic at a time, each timed alone.
		posted, err = s.runLatRead(size)
		rtt = 1
	case pt.SendLat:
		posted, err = s.runLatSend(size)
	}
	if err != nil {
		return err
	}
	st, err := pt.MeasureLat(size, posted, 1000, rtt)
	if err != nil {
		return err
	}
	s.res.Lat = append(s.res.Lat, st)
	io.WriteString(cfg.Stdout, pt.LatLine(st))
	return nil
}

// poll waits for completions on cq and returns them.
func (s *session) poll(ctx context.Context, cq verbs.CQ) ([]verbs.WC, error) {
	for {
		if n := cq.Poll(s.wcs); n > 0 {
			return s.wcs[:n], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return nil, fmt.Errorf("poll CQ failed: %w", err)
		}
	}
}

// sendFailed reports a failed send completion as NOTIFY_COMP_ERROR_SEND.
func (s *session) sendFailed(wc *verbs.WC, scnt, ccnt uint64) error {
	fmt.Fprintf(s.cfg.Stderr, " Completion with error at client\n Failed status %d: wr_id %d syndrom 0x%x\nscnt=%d, ccnt=%d\n",
		int(wc.Status), int(wc.ID), wc.VendErr, scnt, ccnt)
	return fmt.Errorf("%w: %s (%d)", ErrCompletion, wc.Status, int(wc.Status))
}

// recvFailed reports a failed receive completion as NOTIFY_COMP_ERROR_RECV.
func (s *session) recvFailed(wc *verbs.WC, rcnt uint64) error {
	fmt.Fprintf(s.cfg.Stderr, " Completion with error at server\n Failed status %d: wr_id %d syndrom 0x%x\n rcnt=%d\n",
		int(wc.Status), int(wc.ID), wc.VendErr, rcnt)
	return fmt.Errorf("%w: %s (%d)", ErrCompletion, wc.Status, int(wc.Status))
}

// opWR returns QP i's work request for the tool's operation. It is the
// session's one: post it before asking for another.
func (s *session) opWR(i int, local, remote uint64, size uint64) *verbs.SendWR {
	cfg := &s.cfg
	s.sendSG[0] = verbs.SGE{Addr: local, Length: uint32(size), LKey: s.mr.LKey()}
	wr := &s.sendWR
	*wr = verbs.SendWR{ID: uint64(i), SG: s.sendSG[:]}
	rkey := s.remote[i].RKey
	if cfg.BadRKey && cfg.Client {
		rkey = badKey(rkey)
	}
	switch cfg.verb() {
	case pt.Write:
		wr.Op = stack.OpWrite
		wr.Remote = verbs.RemoteAddr{Addr: remote, RKey: rkey}
	case pt.Read:
		wr.Op = stack.OpRead
		wr.Remote = verbs.RemoteAddr{Addr: remote, RKey: rkey}
	case pt.Atomic:
		wr.Remote = verbs.RemoteAddr{Addr: remote, RKey: rkey}
		if cfg.CmpSwap {
			wr.Op, wr.Swap = stack.OpCompareSwap, swapValue
		} else {
			wr.Op, wr.CompareAdd = stack.OpFetchAdd, addValue
		}
	case pt.Send:
		wr.Op = stack.OpSend
		if cfg.UD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs[i], s.remote[i].QPN, udQKey
		}
	}
	if (wr.Op == stack.OpWrite || wr.Op == stack.OpSend) && size <= uint64(cfg.Inline) {
		off := local - s.mr.Addr()
		wr.Flags |= stack.SendInline
		wr.Inline = s.mr.Bytes()[off : off+size]
	}
	return wr
}

func (s *session) close() {
	for _, q := range s.qps {
		q.Destroy()
	}
	for _, ah := range s.ahs {
		if ah != nil {
			ah.Destroy()
		}
	}
	if s.sendCQ != nil {
		s.sendCQ.Destroy()
	}
	if s.recvCQ != nil && s.recvCQ != s.sendCQ {
		s.recvCQ.Destroy()
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
