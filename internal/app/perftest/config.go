package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	pt "github.com/uroce/uroce/internal/oob/perftest"
)

// Defaults and limits of perftest 4.5 (perftest_parameters.h).
const (
	DefaultSizeBW     = 65536
	DefaultSizeLat    = 2
	DefaultSizeAtomic = 8
	DefaultItersWB    = 5000 // ib_write_bw
	DefaultIters      = 1000
	DefaultTxBW       = 128
	DefaultTxLat      = 1
	DefaultRxSend     = 512
	DefaultCQMod      = 100
	DefaultQPTimeout  = 14
	// MaxSize is the largest message, and the size -a allocates for.
	MaxSize = 8388608
	// cqModSizeLimit: above it CQ moderation is off unless asked for.
	cqModSizeLimit = 8192
	minIters       = 5
	maxTx          = 15000
	maxRx          = 16384
	maxCQMod       = 1024
	maxInline      = 912 // perftest's MAX_INLINE
	maxInlineUD    = 884 // MAX_INLINE_UD
	ucMaxRx        = 16000
	udAddition     = 40         // UD_ADDITION: the GRH at the head of a UD receive
	udQKey         = 0x11111111 // DEF_QKEY (and DEFF_QKEY), both sides
	maxQPs         = 16384
	minRNRTimer    = 12
	addValue       = 1 // ATOMIC_ADD_VALUE
	swapValue      = 0 // ATOMIC_SWAP_VALUE
)

// DefaultReadWindow is the default Config.ReadWindow: one 1 MiB READ at a
// time. Every READ in flight after a lost response is requested again
// (go-back-N), and rdma_rxe answers each in full again: perftest's 128
// outstanding 1 MiB READs turn one lost packet into 128 MiB of
// responses, which an emulated peer cannot send before the ACK timer
// runs out seven times. rdma_rxe's own requester keeps at most 128 PSNs
// in flight, one such READ.
const DefaultReadWindow = 1 << 20

// AutoGID asks for the device's best GID: the first IPv4 one, as perftest
// picks without -x.
const AutoGID = -1

// Config selects the tool and its options (the stock flags in comments);
// zero values take perftest's defaults.
type Config struct {
	Tool   pt.Tool
	Client bool // a server name was given

	Size     uint64 // -s
	Iters    int    // -n
	All      bool   // -a: every size from 2 to 8 MiB
	MTU      int    // -m, bytes; 0: the port's active MTU
	GIDIndex int    // -x; AutoGID picks the first IPv4 GID
	QPs      int    // -q
	TxDepth  int    // -t
	RxDepth  int    // -r
	CQMod    int    // -Q
	OutReads int    // -o (read, atomic); 0: the device's maximum
	// QPTimeout is -u (default 14).
	QPTimeout int
	// CmpSwap is -A CMP_AND_SWAP (ib_atomic_bw); FETCH_AND_ADD otherwise.
	CmpSwap bool
	// Gbits is --report_gbits.
	Gbits bool
	// LimitBW and LimitMsgRate are -w and -y (perftest's verifier):
	// with LimitBWOn, a reported average bandwidth (in the report's
	// units) below LimitBW, or a message rate below LimitMsgRate (with
	// LimitMsgRateOn), fails the run with perftest's message, after the
	// report. As perftest 4.5, a message rate below its limit fails the
	// run only when -w is given too.
	LimitBW, LimitMsgRate     float64
	LimitBWOn, LimitMsgRateOn bool
	// Inline is -I: messages of at most this many bytes (WRITE, SEND)
	// go inline, copied into the work request (default 0, none).
	Inline int
	// Duration is -D: the test runs this long instead of Iters, and
	// reports what completed between the first and the last Margin (-f;
	// default a quarter of the duration, as perftest's). A bandwidth
	// client (and with Duplex both sides) reports the rate of its
	// completions, ib_send_bw's server that of its receives, counted
	// from the first; the latency tools print the average latency and
	// the transactions per second of the sampled time instead of their
	// statistics.
	Duration, Margin time.Duration
	marginSet        bool
	// UC is -c UC: unreliable connected QPs (WRITE and SEND only).
	UC bool
	// UD is -c UD: unreliable datagram QPs (ib_send_bw and ib_send_lat).
	// Messages are at most the agreed MTU: a larger -s is refused, the
	// default size and -a's largest are cut to it. Each receive holds
	// the 40 bytes of the GRH before the message.
	UD bool
	// Duplex is -b (bandwidth tools): both sides send at once; each
	// prints its own iterations with the sum of both sides' rates.
	Duplex bool
	// PostList is -l: the bandwidth client posts its requests in lists
	// of this many (default 1); the CQ moderation is then the list's
	// size unless -Q says otherwise.
	PostList int

	// uroce's own options.
	//
	// Verify checks what can be checked of the data: an ib_atomic_bw
	// FETCH_AND_ADD server (one QP) checks that every slot of its buffer
	// grew by exactly the number of additions the client made, so that
	// no retransmitted atomic was executed twice and none was lost.
	Verify bool
	// BadRKey makes a client use, and a server advertise, an R_Key its
	// peer's region does not have: every RDMA operation fails with a
	// remote access error.
	BadRKey bool
	// SetRNRRetry replaces the rnr_retry of 7 the tools set with
	// RNRRetry (0–7).
	SetRNRRetry bool
	RNRRetry    uint8
	// InfiniteRetry gives retry_cnt 7 rdma_rxe's meaning (retry forever).
	InfiniteRetry bool
	// ReadWindow bounds the bytes of RDMA READs a client keeps in flight
	// per QP (at least one READ); 0 means DefaultReadWindow, negative no
	// bound but tx_depth and max_rd_atomic.
	ReadWindow int
	// LateRecv makes an ib_send_bw server post its receives this long
	// after the run started instead of before it: the client's first
	// SENDs meet an empty receive queue and are answered with RNR NAKs.
	LateRecv time.Duration
	// BusyPoll says the device's engines busy-poll (stack.Config.BusyPoll):
	// ib_write_lat then spins longer on its memory before it sleeps (see
	// waitByte), the CPUs being given to polling anyway.
	BusyPoll bool

	// RDMACM is -R: the exchange and the test QPs' connections go over
	// RDMA CM (the in-process device only), to CMAddr (the client: the
	// server's address and -p port; the server: the zero address and the
	// port to listen on). The client retries for ConnectWait while the
	// server does not listen yet. Connect is then not used.
	RDMACM      bool
	CMAddr      netip.AddrPort
	ConnectWait time.Duration

	// Device is the name printed as the device (the interface).
	Device string
	// Connect opens the exchange connection: the server accepts one, the
	// client dials.
	Connect func(ctx context.Context) (net.Conn, error)
	// Stdout and Stderr receive what the tool prints (nil: discarded).
	Stdout, Stderr io.Writer

	// set by normalize
	normalized bool
	reqCQMod   bool
	sizeSet    bool // -s was given
	sizes      []uint64
}

// Sizes returns the message sizes of the measured runs.
func (c *Config) Sizes() []uint64 { return c.sizes }

// ErrUnsupported is returned for options the stock tools have and this
// implementation does not.
var ErrUnsupported = errors.New("not supported")

func (c *Config) verb() pt.Verb { return c.Tool.Verb() }

// normalize applies the defaults and perftest's force_dependecies for the
// options implemented here.
func (c *Config) normalize() error {
	if c.normalized {
		return nil
	}
	if !c.Tool.Valid() {
		return fmt.Errorf("unknown tool %d", int(c.Tool))
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.Connect == nil && !c.RDMACM {
		return errors.New("no connect function")
	}
	if c.RDMACM && c.ConnectWait == 0 {
		c.ConnectWait = 10 * time.Second
	}
	bw := c.Tool.BW()
	verb := c.verb()
	c.sizeSet = c.Size != 0
	if c.Size == 0 {
		switch {
		case verb == pt.Atomic:
			c.Size = DefaultSizeAtomic
		case bw:
			c.Size = DefaultSizeBW
		default:
			c.Size = DefaultSizeLat
		}
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
		if c.Tool == pt.WriteBW {
			c.Iters = DefaultItersWB
		}
	}
	if c.TxDepth == 0 {
		c.TxDepth = DefaultTxLat
		if bw {
			c.TxDepth = DefaultTxBW
		}
	}
	if c.RxDepth == 0 {
		c.RxDepth = 1
		if verb == pt.Send {
			c.RxDepth = DefaultRxSend
		}
	}
	if c.CQMod == 0 {
		c.CQMod = DefaultCQMod
	} else {
		c.reqCQMod = true
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.QPTimeout == 0 {
		c.QPTimeout = DefaultQPTimeout
	}
	switch {
	case c.Size < 1 || c.Size > 1<<31-1:
		return fmt.Errorf("message size %d: should be between 1 and %d", c.Size, uint64(1<<31-1))
	case c.Iters < minIters:
		return fmt.Errorf("iterations %d: at least %d", c.Iters, minIters)
	case c.TxDepth < 1 || c.TxDepth > maxTx:
		return fmt.Errorf("tx depth %d: want 1 to %d", c.TxDepth, maxTx)
	case c.RxDepth < 1 || c.RxDepth > maxRx:
		return fmt.Errorf("rx depth %d: want 1 to %d", c.RxDepth, maxRx)
	case verb != pt.Send && c.RxDepth > 1:
		return errors.New("on RDMA verbs rx depth can be only 1")
	case c.CQMod < 1 || c.CQMod > maxCQMod:
		return fmt.Errorf("CQ moderation %d: want 1 to %d", c.CQMod, maxCQMod)
	case c.QPs < 1 || c.QPs > maxQPs:
		return fmt.Errorf("num of QPs %d: want 1 to %d", c.QPs, maxQPs)
	case c.MTU != 0 && pt.MTUFromBytes(c.MTU) == 0:
		return fmt.Errorf("invalid MTU %d: choose from {256,512,1024,2048,4096}", c.MTU)
	case c.QPTimeout < 0 || c.QPTimeout > 31:
		return fmt.Errorf("qp timeout %d: want 0 to 31", c.QPTimeout)
	case c.SetRNRRetry && c.RNRRetry > 7:
		return fmt.Errorf("rnr retry %d: want 0 to 7", c.RNRRetry)
	case c.OutReads < 0:
		return fmt.Errorf("outstanding reads %d", c.OutReads)
	}
	if c.PostList == 0 {
		c.PostList = 1
	}
	switch {
	case c.UD && verb != pt.Send:
		return errors.New("UD connection only possible in SEND verb")
	case c.UD && c.UC:
		return errors.New("UD and UC together")
	case c.UD && c.RDMACM:
		return fmt.Errorf("UD with -R (rdma_cm): %w", ErrUnsupported)
	case c.Duplex && !bw:
		return errors.New("Bidirectional is only available in BW test")
	case c.Duplex && c.RDMACM:
		return fmt.Errorf("bidirectional (-b) with -R (rdma_cm): %w", ErrUnsupported)
	case c.Duplex && c.LateRecv > 0:
		return errors.New("--late-recv is for the one-way send test")
	}
	if c.Duration > 0 {
		switch {
		case c.Duration%time.Second != 0 || c.Margin%time.Second != 0:
			return errors.New("duration and margin are whole seconds")
		case c.All:
			return errors.New("Duration mode currently doesn't support running on all sizes.")
		}
		if !c.marginSet {
			c.Margin = c.Duration / 4 / time.Second * time.Second
		}
		if c.Duration <= 2*c.Margin {
			return errors.New("please check that DURATION > 2*MARGIN")
		}
	}
	switch {
	case c.UC && (verb == pt.Read || verb == pt.Atomic):
		return errors.New("UC connection not possible in READ/ATOMIC verbs")
	case c.UC && c.RDMACM:
		return errors.New("UC is not supported in librdmacm")
	case c.Inline < 0 || c.Inline > maxInline:
		return fmt.Errorf("Max inline should be between 0 and %d", maxInline)
	case c.PostList < 1:
		return fmt.Errorf("Send Post List size %d: must be positive", c.PostList)
	case c.PostList > 1 && !bw:
		return errors.New("Post list is supported in BW tests only")
	case c.PostList > 1 && c.Duration == 0 && c.Iters%c.PostList != 0:
		return errors.New("Number of iterations must be a multiple of post list size")
	case c.PostList > 1 && c.reqCQMod && c.PostList%c.CQMod != 0:
		return errors.New("Post list size must be a multiple of CQ moderation")
	case c.PostList > c.TxDepth:
		return fmt.Errorf("post list %d: larger than the tx depth %d", c.PostList, c.TxDepth)
	}
	if c.PostList > 1 && !c.reqCQMod {
		c.CQMod = c.PostList
		fmt.Fprint(c.Stdout, pt.ResultLine+"Post List requested - CQ moderation will be the size of the post list\n")
	}
	// force_dependecies
	if c.Duration == 0 {
		if c.TxDepth > c.Iters {
			c.TxDepth = c.Iters
		}
		if verb == pt.Send && c.RxDepth > c.Iters {
			c.RxDepth = c.Iters
		}
		if (c.UC || c.UD) && c.RxDepth == DefaultRxSend {
			// A UC or UD receiver keeps every message's receive
			// posted (UC_MAX_RX at most), nothing being resent.
			c.RxDepth = min(c.Iters, ucMaxRx)
		}
	}
	if c.Size > cqModSizeLimit && !c.UD && !c.All && !c.reqCQMod {
		// Not over UD, whose messages are no larger than the MTU.
		c.CQMod = 1
	}
	if c.CQMod > c.TxDepth {
		c.CQMod = c.TxDepth
	}
	if c.PostList > 1 && c.CQMod%c.PostList != 0 && c.PostList%c.CQMod != 0 {
		return fmt.Errorf("post list %d and CQ moderation %d do not divide each other", c.PostList, c.CQMod)
	}
	if c.All {
		c.Size = MaxSize
	}
	if verb == pt.Atomic && c.Size != DefaultSizeAtomic {
		return errors.New("message size cannot be changed for Atomic tests")
	}
	if c.UD && c.Inline > maxInlineUD {
		fmt.Fprint(c.Stdout, pt.ResultLine)
		fmt.Fprintf(c.Stderr, "Setting inline size to %d (Max inline size in UD)\n", maxInlineUD)
		c.Inline = maxInlineUD
	}
	c.sizes = []uint64{c.Size}
	if c.All {
		c.sizes = pt.AllSizes()
	}
	c.normalized = true
	return nil
}

// bufSize is perftest's BUFF_SIZE: the message size, at least a cycle
// buffer.
func bufSize(size uint64, cycle uint32) uint64 { return max(size, uint64(cycle)) }

// inc is perftest's INC: the step between messages in a cycle buffer.
func inc(size uint64, cacheLine uint32) uint64 {
	cl := uint64(cacheLine)
	if size > cl {
		return (size + cl - 1) / cl * cl
	}
	return cl
}
